package changes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kmanifests "github.com/kokumi-dev/kokumi/internal/manifests"
)

// Kubernetes' view role leaves Secrets out: what a Preparation renders is shown to a person
// with the values of its Secrets masked, as Argo CD masks them, unless they may get Secrets
// where each one goes. RedactSecrets does it for Kokumi's API server (the UI) and the plugin.

const (
	// SecretMask replaces a hidden value of a Secret. Where the Preparations compared hold
	// different values under one key, each distinct value gets a mask one '+' longer than the
	// one before, so that a diff shows that the value changed, not what it is.
	SecretMask = "++++++++"
	// LastAppliedAnnotation is kubectl's annotation that holds an object as it was last
	// applied: of a Secret, its data too.
	LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
)

// Side is the objects a Preparation renders and its target namespace (spec.targetNamespace),
// where the objects that name no namespace go.
type Side struct {
	Objects   []Object
	Namespace string
}

// isSecret reports whether o is a core Secret.
func isSecret(o Object) bool { return o.APIVersion == "v1" && o.Kind == "Secret" }

// RedactSecrets returns the objects of each side with the values of the Secrets that the
// person may not read masked, and names those Secrets, sorted, as Secret/<namespace>/<name>.
// mayRead reports whether the person may get Secrets in a namespace; a Secret goes to its own
// namespace or, when it names none, to its side's. The values of data and stringData and the
// annotation LastAppliedAnnotation are masked, the keys kept. A Secret is matched across sides
// by Key, and masked on every side when one side hides it, with the same mask for the same
// value (see SecretMask). The objects of sides are left as they are.
func RedactSecrets(mayRead func(namespace string) (bool, error), sides ...Side) ([][]Object, []string, error) {
	readable := map[string]bool{}
	hidden := map[string]bool{} // by Key
	for _, s := range sides {
		for _, o := range s.Objects {
			if !isSecret(o) {
				continue
			}
			ns := cmp.Or(o.Namespace, s.Namespace)
			ok, found := readable[ns]
			if !found {
				var err error
				if ok, err = mayRead(ns); err != nil {
					return nil, nil, fmt.Errorf("decide whether the values of Secret %s/%s are shown: %w", ns, o.Name, err)
				}
				readable[ns] = ok
			}
			if !ok {
				hidden[o.Key()] = true
			}
		}
	}
	out := make([][]Object, len(sides))
	for i, s := range sides {
		out[i] = slices.Clone(s.Objects)
	}
	named := []string{}
	if len(hidden) == 0 {
		return out, named, nil
	}
	// The copies of each hidden Secret, side after side, masked together.
	type copyAt struct {
		side, index int
		obj         *unstructured.Unstructured
	}
	copies := map[string][]copyAt{}
	for i, s := range sides {
		for j, o := range s.Objects {
			if !isSecret(o) || !hidden[o.Key()] {
				continue
			}
			named = append(named, "Secret/"+cmp.Or(o.Namespace, s.Namespace)+"/"+o.Name)
			objs, err := kmanifests.Parse([]byte(o.YAML))
			if err != nil || len(objs) != 1 {
				// Objects wrote it: it reads back. Should it not, nothing of it is shown.
				out[i][j].YAML = fmt.Sprintf("# the values of Secret %s are hidden, and its YAML could not be read back to mask them\n", o.Name)
				continue
			}
			copies[o.Key()] = append(copies[o.Key()], copyAt{i, j, objs[0]})
		}
	}
	for key, cs := range copies {
		objs := make([]*unstructured.Unstructured, len(cs))
		for i, c := range cs {
			objs[i] = c.obj
		}
		maskSecrets(objs...)
		for _, c := range cs {
			data, err := kmanifests.Marshal([]*unstructured.Unstructured{c.obj})
			if err != nil {
				return nil, nil, fmt.Errorf("write Secret %s masked: %w", key, err)
			}
			out[c.side][c.index].YAML = string(data)
		}
	}
	slices.Sort(named)
	return out, slices.Compact(named), nil
}

// maskSecrets masks, in place, the values of data and stringData and the annotation
// LastAppliedAnnotation of secrets, copies of one Secret (as Preparations render it): the same
// value gets the same mask in every copy, and each other value under the same key a longer one
// (see SecretMask). A field that is not a map is masked whole.
func maskSecrets(secrets ...*unstructured.Unstructured) {
	var maps []map[string]any
	for _, field := range []string{"data", "stringData"} {
		maps = maps[:0]
		for _, s := range secrets {
			switch v := s.Object[field].(type) {
			case nil:
			case map[string]any:
				maps = append(maps, v)
			default:
				s.Object[field] = SecretMask
			}
		}
		maskValues(maps, nil)
	}
	maps = maps[:0]
	for _, s := range secrets {
		if meta, ok := s.Object["metadata"].(map[string]any); ok {
			if annotations, ok := meta["annotations"].(map[string]any); ok {
				maps = append(maps, annotations)
			}
		}
	}
	maskValues(maps, []string{LastAppliedAnnotation})
}

// maskValues replaces the values of keys (every key when nil) in maps, the same value by the
// same mask and each distinct value of one key by a mask one '+' longer than the one before.
func maskValues(maps []map[string]any, keys []string) {
	if keys == nil {
		for _, m := range maps {
			for k := range m {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
	}
	for _, k := range keys {
		masks := map[string]string{}
		next := SecretMask
		for _, m := range maps {
			v, ok := m[k]
			if !ok {
				continue
			}
			text, err := json.Marshal(v)
			if err != nil {
				text = []byte(fmt.Sprint(v))
			}
			mask, seen := masks[string(text)]
			if !seen {
				mask, masks[string(text)] = next, next
				next += "+"
			}
			m[k] = mask
		}
	}
}

// RedactedNote says, for the Secrets named as RedactSecrets names them, that their values are
// hidden and where the person may not get Secrets; empty when there are none.
func RedactedNote(redacted []string) string {
	if len(redacted) == 0 {
		return ""
	}
	var namespaces []string
	for _, r := range redacted {
		_, rest, _ := strings.Cut(r, "/")
		ns, _, _ := strings.Cut(rest, "/")
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	what := "values of 1 Secret hidden"
	if len(redacted) > 1 {
		what = fmt.Sprintf("values of %d Secrets hidden", len(redacted))
	}
	where := "namespace " + namespaces[0]
	if len(namespaces) != 1 {
		where = "namespaces " + strings.Join(namespaces, ", ")
	}
	return what + ": you may not get secrets in " + where
}
