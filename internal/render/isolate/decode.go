package isolate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/manifests"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// The child writes the objects it rendered as JSON values, one after the other, after its
// response; the parent builds them token by token, each key and value counted as it is built,
// so that what a render costs the controller's memory is bounded before it is spent, whatever
// the chart made (a ConfigMap of millions of short keys is some 12 bytes of YAML a key, and
// costs the heap some 100 bytes a key).
const (
	// valueCost is what a value costs the parent's heap beyond its text: its interface (16
	// bytes), a string's header, a map's or a slice's header and a map entry's share of the
	// map's buckets, rounded up to the allocator's classes.
	valueCost = 48
	// keyCost is what a map key costs beyond its text: its string header and its hash bucket's share.
	keyCost = 32
	// maxDepth is the deepest an object nests: deeper than any Kubernetes object, and shallow
	// enough that no stack grows with the child's output.
	maxDepth = 128
)

// DecodedBytes is the most memory the parent spends on the objects of a render whose output
// budget is outputBytes (render.Limits.OutputBytes), as counted with valueCost and keyCost:
// twice the output budget, 64 MiB by default, so that the render slots together cost the
// controller a bounded part of its memory. Zero means no limit.
func DecodedBytes(outputBytes int64) int64 { return 2 * outputBytes }

// ObjectBytes is the most bytes of JSON one object of a render whose output budget is
// outputBytes takes: an eighth of the output budget, 4 MiB by default, above the API server's
// own limit of an object (1.5 MiB in etcd). Zero means no limit.
func ObjectBytes(outputBytes int64) int64 { return outputBytes / 8 }

// decoder builds a child's objects out of its JSON stream, within its budgets.
type decoder struct {
	dec *json.Decoder
	// spent is what the objects built so far cost, and budget the most they may (0: no limit).
	spent, budget int64
	// objectBytes is the most bytes of JSON one object takes (0: no limit).
	objectBytes int64
	// objects is the most objects (0: no limit).
	objects int
}

// newDecoder reads objects from dec within the budgets of a render held to limits.
func newDecoder(dec *json.Decoder, limits render.Limits) *decoder {
	return &decoder{dec: dec, budget: DecodedBytes(limits.OutputBytes),
		objectBytes: ObjectBytes(limits.OutputBytes), objects: limits.Objects}
}

// all reads the objects up to the end of the stream: an *oci.LimitError of render.LimitDecodedBytes,
// render.LimitObjectBytes or manifests.LimitObjects as soon as one budget is spent.
func (d *decoder) all() ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for {
		start := d.dec.InputOffset()
		v, err := d.value(0, start)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("read the render's output: object %d is no JSON object", len(objs)+1)
		}
		if objs = append(objs, &unstructured.Unstructured{Object: m}); d.objects > 0 && len(objs) > d.objects {
			return nil, &oci.LimitError{Limit: manifests.LimitObjects, Max: int64(d.objects)}
		}
	}
}

// spend counts n bytes of the parent's memory, and the object begun at start.
func (d *decoder) spend(n int64, start int64) error {
	d.spent += n
	if d.budget > 0 && d.spent > d.budget {
		return &oci.LimitError{Limit: render.LimitDecodedBytes, Max: d.budget}
	}
	if d.objectBytes > 0 && d.dec.InputOffset()-start > d.objectBytes {
		return &oci.LimitError{Limit: render.LimitObjectBytes, Max: d.objectBytes}
	}
	return nil
}

// value reads the next JSON value, depth deep in the object begun at start.
func (d *decoder) value(depth int, start int64) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("read the render's output: an object nests deeper than %d", maxDepth)
	}
	tok, err := d.dec.Token()
	if err != nil {
		if depth > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if !errors.Is(err, io.EOF) {
			err = fmt.Errorf("read the render's output: %w", err)
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if err := d.spend(valueCost, start); err != nil {
			return nil, err
		}
		switch t {
		case '{':
			m := map[string]any{}
			for d.dec.More() {
				k, err := d.dec.Token()
				if err != nil {
					return nil, fmt.Errorf("read the render's output: %w", err)
				}
				key, ok := k.(string)
				if !ok {
					return nil, fmt.Errorf("read the render's output: a key %v", k)
				}
				if err := d.spend(keyCost+int64(len(key)), start); err != nil {
					return nil, err
				}
				if m[key], err = d.value(depth+1, start); err != nil {
					return nil, noEOF(err)
				}
			}
			_, err = d.dec.Token() // '}'
			return m, noEOF(err)
		case '[':
			l := []any{}
			for d.dec.More() {
				v, err := d.value(depth+1, start)
				if err != nil {
					return nil, noEOF(err)
				}
				l = append(l, v)
			}
			_, err = d.dec.Token() // ']'
			return l, noEOF(err)
		}
		return nil, fmt.Errorf("read the render's output: an unexpected %v", t)
	case string:
		return t, d.spend(valueCost+int64(len(t)), start)
	default: // float64, bool, nil: as json.Unmarshal makes them
		return t, d.spend(valueCost, start)
	}
}

// noEOF is err, but for an end of the stream in the middle of a value: an unexpected one.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("read the render's output: %w", io.ErrUnexpectedEOF)
	}
	return err
}
