// Package schema_test checks the CRDs' validation (CEL rules, patterns, limits) against a real
// API server: what `kubectl apply` refuses, with the message a person reads.
package schema_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) { harness.Main(m, &env) }

const ns = "schema"

var digest = "sha256:" + strings.Repeat("ab", 32)

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }

func product(name string, mutate func(*v1.Product)) *v1.Product {
	p := &v1.Product{ObjectMeta: meta(name), Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1"},
	}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func order(name string, mutate func(*v1.Order)) *v1.Order {
	o := &v1.Order{ObjectMeta: meta(name), Spec: v1.OrderSpec{
		ProductRef:     v1.LocalObjectReference{Name: "podinfo-fleet"},
		EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
	}}
	if mutate != nil {
		mutate(o)
	}
	return o
}

func preparation(name string, mutate func(*v1.Preparation)) *v1.Preparation {
	p := &v1.Preparation{ObjectMeta: meta(name), Spec: v1.PreparationSpec{
		OrderRef:        v1.LocalObjectReference{Name: "podinfo-edge"},
		ProductRef:      v1.LocalObjectReference{Name: "podinfo-fleet"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digest},
		TargetNamespace: "podinfo",
		Artifact:        v1.Artifact{Ref: "oci://registry.kokumi.svc/platform/podinfo-edge@" + digest, Digest: digest},
		ConfigHash:      "c0ffee",
	}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func serving(name string) *v1.Serving {
	return &v1.Serving{ObjectMeta: meta(name), Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: name}}}
}

func environment(name string, mutate func(*v1.Environment)) *v1.Environment {
	e := &v1.Environment{ObjectMeta: meta(name), Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}},
		Project:         "edge",
	}}
	if mutate != nil {
		mutate(e)
	}
	return e
}

func cluster(name string, mutate func(*v1.Cluster)) *v1.Cluster {
	c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.ClusterSpec{
		Server:         "https://edge-1.example.com:6443",
		CredentialsRef: v1.LocalObjectReference{Name: "edge-1"},
	}}
	if mutate != nil {
		mutate(c)
	}
	return c
}

func TestCreateIsValidatedByTheSchema(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		obj     client.Object
		wantErr string // empty: accepted
	}{
		{"a Product with an oci source is accepted", product("ok", nil), ""},
		{"a Product without source.url is refused", product("no-url", func(p *v1.Product) { p.Spec.Source.URL = "" }), "spec.source.url"},
		{"a Product with an https source is refused", product("https-url", func(p *v1.Product) { p.Spec.Source.URL = "https://example.com/chart" }), "source.url must be an oci:// reference"},
		{"a Product with an unknown image policy is refused", product("bad-policy", func(p *v1.Product) { p.Spec.Images.Policy = "Copy" }), `spec.images.policy: Unsupported value: "Copy"`},
		{"a Product with a bad version is refused", product("bad-version", func(p *v1.Product) { p.Spec.Source.Version = "sha256:xyz" }), "spec.source.version"},
		{"a Product with a target namespace that is no DNS label is refused", product("bad-ns", func(p *v1.Product) { p.Spec.TargetNamespace = "Pod_Info" }), "spec.targetNamespace"},
		{"an Order is accepted", order("ok", nil), ""},
		{"an Order without environmentRef is refused", order("no-env", func(o *v1.Order) { o.Spec.EnvironmentRef.Name = "" }), "spec.environmentRef.name"},
		{"an Order without productRef is refused", order("no-product", func(o *v1.Order) { o.Spec.ProductRef.Name = "" }), "spec.productRef.name"},
		{"an Order with an unknown promotion mode is refused", order("bad-mode", func(o *v1.Order) { o.Spec.Promotion.Mode = "Sometimes" }), `spec.promotion.mode: Unsupported value: "Sometimes"`},
		{"a Preparation is accepted", preparation("ok", nil), ""},
		{"a Preparation without a source digest is refused", preparation("no-digest", func(p *v1.Preparation) { p.Spec.Source.Digest = "" }), "spec.source.digest"},
		{"a Preparation with an artifact outside oci is refused", preparation("bad-artifact", func(p *v1.Preparation) { p.Spec.Artifact.Ref = "https://x/y" }), "artifact.ref must be an oci:// reference"},
		{"a Preparation with 257 images is refused", preparation("many-images", func(p *v1.Preparation) {
			for i := range 257 {
				p.Spec.Images = append(p.Spec.Images, v1.ImagePin{Original: fmt.Sprintf("img%d:1", i), Pinned: "img@" + digest})
			}
		}), "spec.images: Too many: 257: must have at most 256 items"},
		{"an Order of 53 characters is accepted", order(strings.Repeat("a", 53), nil), ""},
		{"an Order of 54 characters is refused, naming Helm's limit", order(strings.Repeat("a", 54), nil), "an Order's name is at most 53 characters: it is the Helm release name"},
		{"a Serving is accepted", serving("ok"), ""},
		{"a Serving that names another Order is refused", &v1.Serving{ObjectMeta: meta("mine"), Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "theirs"}}},
			"spec.orderRef.name must be the Serving's own name"},
		{"an Environment that requires itself is refused", environment("selfish", func(e *v1.Environment) {
			e.Spec.Requires = []v1.StageRequirement{{Environment: "selfish"}}
		}), "spec.requires cannot name the Environment itself"},
		{"a Cluster of 63 characters is accepted", cluster(strings.Repeat("c", 63), nil), ""},
		{"a Cluster of 64 characters is refused", cluster(strings.Repeat("c", 64), nil), "a Cluster's name is at most 63 characters"},
		// A Product's name is the value of its Preparations' label delivery.kokumi.dev/product.
		{"a Product of 63 characters is accepted", product(strings.Repeat("p", 63), nil), ""},
		{"a Product of 64 characters is refused, naming the label limit", product(strings.Repeat("p", 64), nil),
			"a Product's name is at most 63 characters: it is a label value of its Preparations; choose a shorter name"},
		{"a Serving without orderRef is refused", &v1.Serving{ObjectMeta: meta("no-order")}, "spec.orderRef.name"},
		{"an Environment is accepted", environment("ok", nil), ""},
		{"an Environment without project is refused", environment("no-project", func(e *v1.Environment) { e.Spec.Project = "" }), "spec.project"},
		{"an Environment with nine required stages is refused", environment("many-stages", func(e *v1.Environment) {
			for i := range 9 {
				e.Spec.Requires = append(e.Spec.Requires, v1.StageRequirement{Environment: fmt.Sprintf("s%d", i)})
			}
		}), "spec.requires: Too many: 9: must have at most 8 items"},
		{"a Cluster is accepted", cluster("ok", nil), ""},
		{"a Cluster with an http server is refused", cluster("http", func(c *v1.Cluster) { c.Spec.Server = "http://edge-1:6443" }), "server must be an https:// URL"},
		{"a Cluster without credentials is refused", cluster("no-creds", func(c *v1.Cluster) { c.Spec.CredentialsRef.Name = "" }), "spec.credentialsRef.name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, tc.obj)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want accepted, got %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("want refused with %q, got accepted", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestOrderEnvironmentCannotChange(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	o := order("env-fixed", nil)
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if o.Spec.Promotion.Mode != v1.PromotionManual {
		t.Errorf("promotion.mode defaults to %q, want Manual", o.Spec.Promotion.Mode)
	}
	o.Spec.TargetNamespace = "elsewhere"
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("changing the target namespace is allowed, got %v", err)
	}
	o.Spec.EnvironmentRef.Name = "prod"
	err := env.Client.Update(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "create another Order to deploy to another Environment") {
		t.Fatalf("want environmentRef change refused with the create-another-Order message, got %v", err)
	}
}

func TestPreparationSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	p := preparation("immutable", nil)
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.TargetNamespace = "other"
	err := env.Client.Update(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "a Preparation is immutable") {
		t.Fatalf("want the spec change refused, got %v", err)
	}
	// Status stays writable: deployment records are added to it.
	p.Spec.TargetNamespace = "podinfo"
	p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: "edge", Clusters: 3, Time: metav1.Now(), Digest: digest}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("status update refused: %v", err)
	}
}

func TestServingTargetsAreCapped(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	s := serving("capped")
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	targets := func(n int) []v1.Target {
		out := make([]v1.Target, n)
		for i := range out {
			out[i] = v1.Target{Cluster: fmt.Sprintf("edge-%03d", i), Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: "Progressing"}}}
		}
		return out
	}
	s.Status.Targets = targets(v1.MaxTargets)
	if err := env.Client.Status().Update(ctx, s); err != nil {
		t.Fatalf("64 targets refused: %v", err)
	}
	s.Status.Targets = targets(v1.MaxTargets + 1)
	err := env.Client.Status().Update(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "status.targets: Too many: 65: must have at most 64 items") {
		t.Fatalf("want 65 targets refused, got %v", err)
	}
}

func TestServingPrinterColumns(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	s := serving("columns")
	s.Spec.PreparationName = "columns-3f2a1c"
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Status.Clusters = v1.ClusterCounts{Selected: 3, Healthy: 2, Drifted: 1}
	s.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonDeployed, Message: "Deployed", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	out, err := env.Kubectl(ctx, "get", "serving", "columns", "-n", ns, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and a row, got %q", out)
	}
	if got, want := strings.Fields(lines[0]), []string{"NAME", "ORDER", "PREPARATION", "CLUSTERS", "HEALTHY", "DRIFTED", "READY", "REASON", "AGE"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("columns %v, want %v", got, want)
	}
	if got := strings.Fields(lines[1]); len(got) < 8 || strings.Join(got[:8], " ") != "columns columns columns-3f2a1c 3 2 1 True Deployed" {
		t.Errorf("row %v", got)
	}
	// Drifted is a wide column: the plain listing stays as narrow as it was.
	out, err = env.Kubectl(ctx, "get", "serving", "columns", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(got, " ") != "NAME ORDER PREPARATION CLUSTERS HEALTHY READY REASON AGE" {
		t.Errorf("columns without -o wide %v", got)
	}
	// The category kokumi lists every kind; short names resolve.
	for _, args := range [][]string{{"get", "kokumi", "-n", ns}, {"get", "srv,ord,prod,prep,env", "-n", ns}, {"get", "kcluster"}} {
		if _, err := env.Kubectl(ctx, args...); err != nil {
			t.Errorf("kubectl %v: %v", args, err)
		}
	}
}

// TestAProductHasNoStatus checks that the Product kind serves no status a person could read as
// an observation: nothing observes a Product alone (its Orders say whether it renders), so a
// status written into one is pruned and there is no status subresource to write.
func TestAProductHasNoStatus(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.GroupVersion.String(), "kind": "Product",
		"metadata": map[string]any{"name": "no-status", "namespace": ns},
		"spec":     map[string]any{"source": map[string]any{"url": "oci://ghcr.io/stefanprodan/charts/podinfo", "version": "6.14.1"}},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Fake", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}}},
	}}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(v1.GroupVersion.WithKind("Product"))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Object["status"]; ok {
		t.Errorf("a Product keeps a status: %v", got.Object["status"])
	}
	if err := env.Client.Status().Update(ctx, got); err == nil {
		t.Error("a Product's status subresource accepts a write")
	}
}
