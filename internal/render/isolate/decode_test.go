package isolate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// configMap is the JSON of a ConfigMap of keys short keys.
func configMap(keys int) []byte {
	data := make(map[string]any, keys)
	for i := range keys {
		data[fmt.Sprintf("k%d", i)] = "v"
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "many"}, "data": data})
	return b
}

// What the decoder counts is no less than what the objects it builds hold of the heap, for the
// objects that cost most for their text: a map of short keys.
func TestTheDecodersCountIsNoLessThanTheHeapItsObjectsHold(t *testing.T) {
	b := configMap(200_000)
	before := liveHeap()
	d := newDecoder(json.NewDecoder(bytes.NewReader(b)), render.Limits{})
	objs, err := d.all()
	if err != nil {
		t.Fatal(err)
	}
	held := int64(liveHeap()) - int64(before)
	runtime.KeepAlive(objs)
	t.Logf("200,000 keys in %d KiB of JSON: counted %d KiB, held %d KiB of the heap", len(b)>>10, d.spent>>10, held>>10)
	if len(objs) != 1 || len(objs[0].Object["data"].(map[string]any)) != 200_000 {
		t.Fatalf("decoded %d objects", len(objs))
	}
	if held > d.spent {
		t.Errorf("the objects hold %d bytes of the heap, the decoder counted %d", held, d.spent)
	}
}

// The decoder stops at its budget, of the objects in all and of one object, each named.
func TestTheDecoderStopsAtItsBudgets(t *testing.T) {
	b := configMap(100_000)
	// 40 ConfigMaps of 10,000 keys: some 5 MiB of JSON, each object 130 KiB.
	many := bytes.Repeat(configMap(10_000), 40)
	for _, c := range []struct {
		in     []byte
		limits render.Limits
		limit  string
		max    int64
	}{
		{many, render.Limits{OutputBytes: 8 << 20}, render.LimitDecodedBytes, 16 << 20},
		{b, render.Limits{OutputBytes: 8 << 20}, render.LimitObjectBytes, 1 << 20},
		{append(append([]byte{}, b...), b...), render.Limits{OutputBytes: 16 << 20, Objects: 1}, "objects", 1},
	} {
		_, err := newDecoder(json.NewDecoder(bytes.NewReader(c.in)), c.limits).all()
		var le *oci.LimitError
		if !errors.As(err, &le) || le.Limit != c.limit || le.Max != c.max {
			t.Errorf("limits %+v: err %v, want the limit of %d %s", c.limits, err, c.max, c.limit)
		}
	}
	objs, err := newDecoder(json.NewDecoder(bytes.NewReader(b)), render.Limits{OutputBytes: 16 << 20, Objects: 1}).all()
	if err != nil || len(objs) != 1 {
		t.Errorf("within the budgets: %d objects, %v", len(objs), err)
	}
	objs, err = newDecoder(json.NewDecoder(bytes.NewReader(many)), render.Limits{OutputBytes: 32 << 20}).all()
	if err != nil || len(objs) != 40 {
		t.Errorf("within the default budgets: %d objects, %v", len(objs), err)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
