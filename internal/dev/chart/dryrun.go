package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/render"
)

// KubeVersion is the Kubernetes version the chart is rendered for when no cluster is asked (the
// chart's kubeVersion needs 1.30 or newer).
const KubeVersion = "v1.37.0"

// Render renders a chart archive as `helm template <release> --namespace <namespace>` does,
// into objects.
func Render(ctx context.Context, archive []byte, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	out, err := render.Helm(ctx, archive, render.HelmOptions{ReleaseName: release, Namespace: namespace, Values: values, KubeVersion: KubeVersion})
	if err != nil {
		return nil, err
	}
	return Decode(out)
}

// Decode splits a YAML stream into objects, skipping empty documents.
func Decode(stream []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Key names an object as "Kind namespace/name".
func Key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// Finding is what the API server said of one object in a dry run.
type Finding struct {
	// Object is "Kind namespace/name".
	Object string
	// Err is the refusal, or nil.
	Err error
	// Warnings are the API server's warnings (Pod Security's among them).
	Warnings []string
}

// DryRunReport is what a dry-run install found.
type DryRunReport struct {
	// Findings are the objects refused or warned about, in order.
	Findings []Finding
	// Objects is how many objects were applied; Pods how many workload Pods were created.
	Objects, Pods int
}

// OK is true when nothing was refused or warned about.
func (r DryRunReport) OK() bool { return len(r.Findings) == 0 }

// warnings collects what the API server warns of.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

// HandleWarningHeader records one warning.
func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// DryRunner applies objects with server-side apply in dry run, as
// `kubectl apply --server-side --dry-run=server` does, recording the API server's warnings, and
// creates each workload's Pod in dry run, as its controller would: Pod Security admission
// enforces on Pods, and only warns on workloads.
type DryRunner struct {
	c    client.Client
	warn *warnings
}

// NewDryRunner makes a DryRunner for the cluster of cfg.
func NewDryRunner(cfg *rest.Config, scheme *runtime.Scheme) (*DryRunner, error) {
	w := &warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return &DryRunner{c: c, warn: w}, nil
}

// Apply applies obj with server-side apply in dry run and returns the warnings it raised.
func (d *DryRunner) Apply(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	obj = obj.DeepCopy()
	obj.SetManagedFields(nil)
	d.warn.take()
	//nolint:staticcheck // client.Apply with an unstructured object is server-side apply.
	err := d.c.Patch(ctx, obj, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("kokumi-install"))
	return d.warn.take(), err
}

// CreatePodOf creates, in dry run, the Pod a workload's template makes.
func (d *DryRunner) CreatePodOf(ctx context.Context, workload *unstructured.Unstructured) error {
	tmpl, found, err := unstructured.NestedMap(workload.Object, "spec", "template")
	if err != nil || !found {
		return fmt.Errorf("%s has no spec.template", Key(workload))
	}
	raw, err := json.Marshal(tmpl)
	if err != nil {
		return fmt.Errorf("%s: spec.template: %w", Key(workload), err)
	}
	var pt corev1.PodTemplateSpec
	if err := json.Unmarshal(raw, &pt); err != nil {
		return fmt.Errorf("%s: spec.template: %w", Key(workload), err)
	}
	pod := &corev1.Pod{ObjectMeta: pt.ObjectMeta, Spec: pt.Spec}
	pod.Namespace = workload.GetNamespace()
	pod.Name = workload.GetName() + "-dry-run"
	return d.c.Create(ctx, pod, client.DryRunAll)
}

// Install applies every object in dry run and creates every workload's Pod in dry run, and
// reports each refusal and warning. Namespaces named by the objects must exist.
func (d *DryRunner) Install(ctx context.Context, objs []*unstructured.Unstructured) DryRunReport {
	var r DryRunReport
	for _, o := range objs {
		warns, err := d.Apply(ctx, o)
		r.Objects++
		if err != nil || len(warns) > 0 {
			r.Findings = append(r.Findings, Finding{Object: Key(o), Err: err, Warnings: warns})
		}
		if err != nil {
			continue
		}
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
			r.Pods++
			if err := d.CreatePodOf(ctx, o); err != nil {
				r.Findings = append(r.Findings, Finding{Object: "Pod of " + Key(o), Err: err})
			}
		}
	}
	return r
}

// PodSecurityEnforce is the label that makes Pod Security admission enforce a standard on a
// namespace.
const PodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// DryRunInstall renders the chart archive for a release in namespace and installs it in dry
// run on the cluster of cfg: what `helm install --dry-run=server` checks, and each workload's Pod
// against Pod Security admission. The namespace must exist and enforce the restricted Pod
// Security Standard, as docs/install.md sets it up; a finding says so otherwise.
func DryRunInstall(ctx context.Context, cfg *rest.Config, archive []byte, release, namespace string, values map[string]any) (DryRunReport, error) {
	objs, err := Render(ctx, archive, release, namespace, values)
	if err != nil {
		return DryRunReport{}, err
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return DryRunReport{}, fmt.Errorf("dry-run install: %w", err)
	}
	d, err := NewDryRunner(cfg, scheme)
	if err != nil {
		return DryRunReport{}, err
	}
	var ns corev1.Namespace
	if err := d.c.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return DryRunReport{}, fmt.Errorf("namespace %s: %w (create it first: kubectl create namespace %s; kubectl label namespace %s %s=restricted)",
			namespace, err, namespace, namespace, PodSecurityEnforce)
	}
	report := d.Install(ctx, objs)
	if level := ns.Labels[PodSecurityEnforce]; level != "restricted" {
		report.Findings = append(report.Findings, Finding{Object: "Namespace /" + namespace,
			Err: fmt.Errorf("enforces Pod Security %q, not restricted: kubectl label namespace %s %s=restricted --overwrite", level, namespace, PodSecurityEnforce)})
	}
	return report, nil
}
