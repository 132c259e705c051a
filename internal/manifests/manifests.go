// Package manifests reads and writes Kubernetes YAML streams as objects: parse (with a bound on
// the objects), set the target namespace, marshal. It links no renderer, so that what only shows
// manifests (the kubectl plugin's diff) stays small.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// LimitObjects counts the objects a source renders to (an *oci.LimitError's Limit).
const LimitObjects = "objects"

// clusterScoped lists the built-in kinds that have no namespace, by group/kind.
var clusterScoped = map[string]bool{
	"/Namespace": true, "/Node": true, "/PersistentVolume": true, "/ComponentStatus": true,
	"rbac.authorization.k8s.io/ClusterRole": true, "rbac.authorization.k8s.io/ClusterRoleBinding": true,
	"apiextensions.k8s.io/CustomResourceDefinition":                 true,
	"apiregistration.k8s.io/APIService":                             true,
	"admissionregistration.k8s.io/MutatingWebhookConfiguration":     true,
	"admissionregistration.k8s.io/ValidatingWebhookConfiguration":   true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicy":        true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicyBinding": true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicy":          true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicyBinding":   true,
	"storage.k8s.io/StorageClass":                                   true,
	"storage.k8s.io/CSIDriver":                                      true,
	"storage.k8s.io/CSINode":                                        true,
	"storage.k8s.io/VolumeAttachment":                               true,
	"storage.k8s.io/VolumeAttributesClass":                          true,
	"scheduling.k8s.io/PriorityClass":                               true,
	"node.k8s.io/RuntimeClass":                                      true,
	"networking.k8s.io/IngressClass":                                true,
	"networking.k8s.io/IPAddress":                                   true,
	"networking.k8s.io/ServiceCIDR":                                 true,
	"policy/PodSecurityPolicy":                                      true,
	"certificates.k8s.io/CertificateSigningRequest":                 true,
	"certificates.k8s.io/ClusterTrustBundle":                        true,
	"flowcontrol.apiserver.k8s.io/FlowSchema":                       true,
	"flowcontrol.apiserver.k8s.io/PriorityLevelConfiguration":       true,
	"resource.k8s.io/DeviceClass":                                   true,
	"resource.k8s.io/ResourceSlice":                                 true,
	"gateway.networking.k8s.io/GatewayClass":                        true,
	"storagemigration.k8s.io/StorageVersionMigration":               true,
	"internal.apiserver.k8s.io/StorageVersion":                      true,
	"authentication.k8s.io/SelfSubjectReview":                       true,
	"authorization.k8s.io/SelfSubjectAccessReview":                  true,
	"authorization.k8s.io/SubjectAccessReview":                      true,
	"authorization.k8s.io/SelfSubjectRulesReview":                   true,
	"metrics.k8s.io/NodeMetrics":                                    true,
	"apiserverinternal.k8s.io/StorageVersion":                       true,
	"snapshot.storage.k8s.io/VolumeSnapshotClass":                   true,
	"snapshot.storage.k8s.io/VolumeSnapshotContent":                 true,
}

// Parse reads a YAML stream into objects, skipping empty documents and unwrapping Lists.
func Parse(stream []byte) ([]*unstructured.Unstructured, error) {
	return ParseLimited(stream, 0)
}

// ParseLimited is Parse that stops with an *oci.LimitError once the stream holds more than
// maxObjects objects (0: no limit).
func ParseLimited(stream []byte, maxObjects int) ([]*unstructured.Unstructured, error) {
	tooMany := func(objs []*unstructured.Unstructured) error {
		if maxObjects > 0 && len(objs) > maxObjects {
			return &oci.LimitError{Limit: LimitObjects, Max: int64(maxObjects)}
		}
		return nil
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read YAML document %d: %w", i, err)
		}
		if isBlank(doc) {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("parse YAML document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("YAML document %d has no apiVersion or kind", i)
		}
		if u.IsList() {
			if err := u.EachListItem(func(o runtime.Object) error {
				objs = append(objs, o.(*unstructured.Unstructured))
				return tooMany(objs)
			}); err != nil {
				if le := tooMany(objs); le != nil {
					return nil, le
				}
				return nil, fmt.Errorf("read list in YAML document %d: %w", i, err)
			}
			continue
		}
		objs = append(objs, u)
		if err := tooMany(objs); err != nil {
			return nil, err
		}
	}
}

func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && t != "---" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

// SetNamespace gives every namespaced object without a namespace the target namespace.
// Cluster-scoped objects are the built-in ones and the kinds of CustomResourceDefinitions
// among objs declared with scope Cluster.
func SetNamespace(objs []*unstructured.Unstructured, namespace string) {
	scoped := map[string]bool{}
	for k, v := range clusterScoped {
		scoped[k] = v
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		scoped[group+"/"+kind] = scope == "Cluster"
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if scoped[gvk.Group+"/"+gvk.Kind] || o.GetNamespace() != "" {
			continue
		}
		o.SetNamespace(namespace)
	}
}

// Marshal writes objects as one YAML stream, in order, with sorted keys.
func Marshal(objs []*unstructured.Unstructured) ([]byte, error) {
	var out bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("marshal %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}
