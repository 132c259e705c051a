package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	prepfiles "github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// These tests cover what the UI shows of Preparations (their manifests, what changes from one
// to another), the rollback, and the Order form's checks of what a namespace offers.

// nextSecond waits for the next second: creation timestamps have a second's precision, and
// Preparations are ordered by them.
func nextSecond() {
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
}

// pushManifests pushes an artifact of manifests as Kokumi does (one gzipped tar layer holding
// manifests.yaml) and returns its digest.
func pushManifests(t *testing.T, repository, manifests string) string {
	t.Helper()
	layer, err := oci.TarGz(map[string][]byte{prepfiles.ManifestsFile: []byte(manifests)})
	must(t, err)
	d, err := (&oci.Client{}).PushArtifact(context.Background(), repository, layer, nil)
	must(t, err)
	return d
}

// artifactPrep creates a Ready Preparation of order whose artifact is repository@digest.
func artifactPrep(t *testing.T, ns, name, order, repository, digest, version string, images []v1.ImagePin, records ...v1.DeploymentRecord) {
	t.Helper()
	ctx := context.Background()
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: version, Digest: "sha256:" + strings.Repeat("5", 64)},
		TargetNamespace: "podinfo", Images: images,
		Artifact:   v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
		ConfigHash: "hash-" + name,
	}}
	must(t, env.Client.Create(ctx, p))
	apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"})
	p.Status.DeploymentRecords = records
	must(t, env.Client.Status().Update(ctx, p))
}

type fieldRefusal struct {
	Error  string              `json:"error"`
	Fields []server.FieldError `json:"fields"`
}

func (f fieldRefusal) field(name string) string {
	for _, e := range f.Fields {
		if e.Field == name {
			return e.Message
		}
	}
	return ""
}

const (
	deploymentYAML = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: podinfo\n  namespace: podinfo\nspec:\n  replicas: %d\n"
	serviceYAML    = "apiVersion: v1\nkind: Service\nmetadata:\n  name: podinfo\n  namespace: podinfo\nspec:\n  ports:\n  - port: 9898\n"
	configMapYAML  = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: podinfo\ndata:\n  color: %s\n"
)

func TestTheOrderFormRefusesWhatTheNamespaceLacksAllAtOnce(t *testing.T) {
	ctx := context.Background()
	ns := "team-order-refs"
	must(t, env.CreateNamespace(ctx, ns))
	for _, name := range []string{"edge", "prod", "qa", "staging", "dev", "lab"} {
		environment(t, ns, name)
	}
	path := "/api/v1/namespaces/" + ns + "/orders"
	var out fieldRefusal
	res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.OrderRequest{Name: "web", Product: "podinfo", Environment: "edgy"}}, &out)
	if res.StatusCode != http.StatusUnprocessableEntity || len(out.Fields) != 2 {
		t.Fatalf("an Order of a missing Product and Environment: %d %+v, want 422 naming both", res.StatusCode, out)
	}
	if want := `no Product "podinfo" in team-order-refs: it has none`; !strings.HasPrefix(out.field("product"), want) || out.Error != "product: "+out.field("product") {
		t.Errorf("product: %+v, want %q first", out, want)
	}
	if want := `no Environment "edgy" in team-order-refs: pick one of dev, edge, lab, prod, qa … and 1 more`; out.field("environment") != want {
		t.Errorf("environment: %q, want %q", out.field("environment"), want)
	}

	must(t, env.Client.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo"}, Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1"},
	}}))
	out = fieldRefusal{}
	res = do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.OrderRequest{Name: "web", Product: "podinfo2", Environment: "edge"}}, &out)
	if res.StatusCode != http.StatusUnprocessableEntity || len(out.Fields) != 1 || out.field("product") != `no Product "podinfo2" in team-order-refs: pick one of podinfo` {
		t.Errorf("an Order of a missing Product: %d %+v", res.StatusCode, out)
	}
	var created map[string]string
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.OrderRequest{Name: "web", Product: "podinfo", Environment: "lab"}}, &created); res.StatusCode != http.StatusCreated {
		t.Errorf("an Order of what the namespace has: %d %v", res.StatusCode, created)
	}

	// A tenant (edit) is told the same; a stranger is refused, and told nothing of the names.
	tenant := serviceAccountToken(t, ns, "tenant")
	bindClusterRole(t, ns, "edit", ns, "tenant")
	out = fieldRefusal{}
	res = do(t, call{server: k8sBase, method: http.MethodPost, path: path, bearer: tenant, body: server.OrderRequest{Name: "web2", Product: "nope", Environment: "nope"}}, &out)
	if res.StatusCode != http.StatusUnprocessableEntity || out.field("product") == "" || out.field("environment") == "" {
		t.Errorf("a tenant's Order of what the namespace lacks: %d %+v", res.StatusCode, out)
	}
	stranger := serviceAccountToken(t, ns, "stranger")
	var refused map[string]any
	res = do(t, call{server: k8sBase, method: http.MethodPost, path: path, bearer: stranger, body: server.OrderRequest{Name: "web3", Product: "nope", Environment: "nope"}}, &refused)
	if res.StatusCode != http.StatusForbidden || strings.Contains(fmt.Sprint(refused), "pick one of") {
		t.Errorf("a stranger's Order: %d %v, want 403 naming nothing of the namespace", res.StatusCode, refused)
	}
}

func TestEnvironmentsSayHowManyOfTheirClustersAreReady(t *testing.T) {
	ctx := context.Background()
	ns := "team-env-counts"
	must(t, env.CreateNamespace(ctx, ns))
	environment(t, ns, "edge")
	var e v1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, &e))
	e.Status.Clusters, e.Status.ReadyClusters = 3, 2
	must(t, env.Client.Status().Update(ctx, &e))
	get(t, "/api/v1/namespaces/"+ns+"/environments", func(l list[view.EnvironmentSummary]) error {
		if len(l.Items) != 1 || l.Items[0].Clusters != 3 || l.Items[0].ReadyClusters != 2 {
			return fmt.Errorf("environments %+v, want edge with 2 of 3 clusters Ready", l.Items)
		}
		return nil
	})
	var raw struct {
		Items []map[string]any `json:"items"`
	}
	do(t, call{path: "/api/v1/namespaces/" + ns + "/environments", bearer: token}, &raw)
	if raw.Items[0]["readyClusters"] != float64(2) || raw.Items[0]["clusters"] != float64(3) {
		t.Errorf("JSON %v, want clusters 3 and readyClusters 2", raw.Items[0])
	}
}

func TestTheUIShowsAPreparationsManifestsAndWhatChanges(t *testing.T) {
	ctx := context.Background()
	ns := "team-manifests"
	must(t, env.CreateNamespace(ctx, ns))
	reg := ocitest.Start(t)
	repository := reg.Addr + "/" + ns + "/web"
	big := fmt.Sprintf(configMapYAML, "big", strings.Repeat("x", 100<<10))
	m1 := fmt.Sprintf(deploymentYAML, 2) + "---\n" + serviceYAML + "---\n" + fmt.Sprintf(configMapYAML, "gone", "red")
	m2 := fmt.Sprintf(deploymentYAML, 3) + "---\n" + serviceYAML + "---\n" + big
	var many strings.Builder
	for i := range server.MaxObjects + 5 {
		fmt.Fprintf(&many, configMapYAML+"---\n", fmt.Sprintf("cm-%03d", i), "blue")
	}
	d1, d2, d3 := pushManifests(t, repository, m1), pushManifests(t, repository, m2), pushManifests(t, repository, many.String())
	pin := func(ref, d string) v1.ImagePin {
		return v1.ImagePin{Original: ref, Pinned: strings.Split(strings.Split(ref, "@")[0], ":")[0] + "@sha256:" + strings.Repeat(d, 64)}
	}
	artifactPrep(t, ns, "web-1", "web", repository, d1, "6.1.0", []v1.ImagePin{pin("ghcr.io/podinfo:6.1.0", "a"), pin("redis:7", "b")})
	artifactPrep(t, ns, "web-2", "web", repository, d2, "6.2.0", []v1.ImagePin{pin("ghcr.io/podinfo:6.2.0", "c"), pin("busybox:1", "d")})
	artifactPrep(t, ns, "web-3", "web", repository, d3, "6.3.0", nil)
	artifactPrep(t, ns, "web-gone", "web", repository, "sha256:"+strings.Repeat("9", 64), "6.4.0", nil)
	artifactPrep(t, ns, "other-1", "other", repository, d1, "6.1.0", nil)
	manifests := func(name string) string { return "/api/v1/namespaces/" + ns + "/preparations/" + name + "/manifests" }
	diff := func(name, against string) string {
		return "/api/v1/namespaces/" + ns + "/preparations/" + name + "/diff?against=" + against
	}

	m := get(t, manifests("web-2"), func(m server.PreparationManifests) error { return nil })
	if m.Preparation != "web-2" || m.Digest != d2 || len(m.Images) != 2 || m.Images[0].Original != "ghcr.io/podinfo:6.2.0" || m.ObjectsOmitted != 0 || len(m.Objects) != 3 {
		t.Fatalf("manifests of web-2: %+v", m)
	}
	if o := m.Objects[0]; o.Kind != "Deployment" || o.Namespace != "podinfo" || o.Name != "podinfo" || !strings.Contains(o.YAML, "replicas: 3") {
		t.Errorf("first object %+v, want the Deployment, as the manifests list it", o)
	}
	if o := m.Objects[2]; o.Kind != "ConfigMap" || o.Name != "big" || len(o.YAML) > server.MaxObjectText || !strings.Contains(o.YAML, "# … truncated: the object's YAML is ") || !strings.HasPrefix(o.YAML, "apiVersion: v1\n") {
		t.Errorf("the big ConfigMap: %d bytes ending %q, want at most %d with a note", len(o.YAML), o.YAML[max(0, len(o.YAML)-100):], server.MaxObjectText)
	}
	m = get(t, manifests("web-3"), func(m server.PreparationManifests) error { return nil })
	if len(m.Objects) != server.MaxObjects || m.ObjectsOmitted != 5 || m.Objects[0].Name != "cm-000" || m.Objects[server.MaxObjects-1].Name != fmt.Sprintf("cm-%03d", server.MaxObjects-1) {
		t.Errorf("manifests of web-3: %d objects, %d omitted, want %d and 5 in manifest order", len(m.Objects), m.ObjectsOmitted, server.MaxObjects)
	}

	// What changes if web-2 is promoted over web-1.
	d := get(t, diff("web-2", "web-1"), func(d server.PreparationDiff) error { return nil })
	if d.From != "web-1" || d.To != "web-2" {
		t.Errorf("from %q to %q", d.From, d.To)
	}
	if fmt.Sprint(d.Fields) != "[{source.version 6.1.0 6.2.0} {configHash hash-web-1 hash-web-2}]" {
		t.Errorf("fields %v, want the source version and the config hash", d.Fields)
	}
	wantImages := "[{busybox  busybox:1@sha256:" + strings.Repeat("d", 64) + " added} " +
		"{ghcr.io/podinfo ghcr.io/podinfo:6.1.0@sha256:" + strings.Repeat("a", 64) + " ghcr.io/podinfo:6.2.0@sha256:" + strings.Repeat("c", 64) + " changed} " +
		"{redis redis:7@sha256:" + strings.Repeat("b", 64) + "  removed}]"
	if fmt.Sprint(d.Images) != wantImages {
		t.Errorf("images %v\nwant %s", d.Images, wantImages)
	}
	var got []string
	for _, o := range d.Objects {
		got = append(got, o.Change+" "+o.Kind+" "+o.Name)
	}
	if fmt.Sprint(got) != "[changed Deployment podinfo added ConfigMap big removed ConfigMap gone]" || d.ObjectsOmitted != 0 {
		t.Fatalf("objects %v (omitted %d)", got, d.ObjectsOmitted)
	}
	if dep := d.Objects[0].Diff; !strings.HasPrefix(dep, "--- web-1/apps/v1/Deployment/podinfo/podinfo\n+++ web-2/apps/v1/Deployment/podinfo/podinfo\n") ||
		!strings.Contains(dep, "\n-  replicas: 2\n+  replicas: 3\n") {
		t.Errorf("diff of the Deployment:\n%s", dep)
	}
	if bigDiff := d.Objects[1].Diff; len(bigDiff) > server.MaxObjectText || !strings.Contains(bigDiff, "# … truncated: the diff is ") || !strings.HasPrefix(bigDiff, "--- /dev/null\n") {
		t.Errorf("diff of the big ConfigMap: %d bytes", len(bigDiff))
	}
	if gone := d.Objects[2].Diff; !strings.HasPrefix(gone, "--- web-1/v1/ConfigMap/podinfo/gone\n+++ /dev/null\n") || !strings.Contains(gone, "-  color: red\n") {
		t.Errorf("diff of the removed ConfigMap:\n%s", gone)
	}
	// web-1's 3 objects go and web-3's 205 come: 208 changes, of which MaxObjects are shown.
	d = get(t, diff("web-3", "web-1"), func(d server.PreparationDiff) error { return nil })
	if len(d.Objects) != server.MaxObjects || d.ObjectsOmitted != 3+server.MaxObjects+5-server.MaxObjects {
		t.Errorf("diff of web-3 over web-1: %d objects, %d omitted, want %d and 8", len(d.Objects), d.ObjectsOmitted, server.MaxObjects)
	}

	// Refusals: against missing, unknown, of another Order; a missing Preparation; a registry
	// that lacks the artifact.
	for _, c := range []struct{ path, want string }{
		{"/api/v1/namespaces/" + ns + "/preparations/web-2/diff", "against: name the Preparation of Order web to compare web-2 with"},
		{diff("web-2", "web-9"), `against: no Preparation "web-9" in team-manifests`},
		{diff("web-2", "other-1"), "against: other-1 belongs to Order other, not web"},
	} {
		var out fieldRefusal
		if res := do(t, call{path: c.path, bearer: token}, &out); res.StatusCode != http.StatusUnprocessableEntity || !strings.HasPrefix(out.Error, c.want) || out.field("against") == "" {
			t.Errorf("GET %s: %d %+v, want 422 %q", c.path, res.StatusCode, out, c.want)
		}
	}
	for _, path := range []string{manifests("web-9"), diff("web-9", "web-1")} {
		if res := do(t, call{path: path, bearer: token}, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.StatusCode)
		}
	}
	for _, path := range []string{manifests("web-gone"), diff("web-gone", "web-1"), diff("web-1", "web-gone")} {
		var out map[string]string
		if res := do(t, call{path: path, bearer: token}, &out); res.StatusCode != http.StatusBadGateway || !strings.Contains(out["error"], "read the manifests from the registry") || len(out["error"]) > 300 {
			t.Errorf("GET %s: %d %v, want 502 with a short message", path, res.StatusCode, out)
		}
	}

	// A viewer may read them; someone without a role in the namespace may not, Preparation
	// missing or not (no oracle).
	viewer := serviceAccountToken(t, ns, "viewer")
	bindClusterRole(t, ns, "view", ns, "viewer")
	getAs(t, call{server: k8sBase, path: diff("web-2", "web-1"), bearer: viewer}, func(d server.PreparationDiff) error {
		if len(d.Objects) != 3 {
			return fmt.Errorf("%d objects", len(d.Objects))
		}
		return nil
	})
	nobody := serviceAccountToken(t, ns, "nobody")
	for _, path := range []string{manifests("web-2"), manifests("web-9"), diff("web-2", "web-1"), diff("web-9", "web-1")} {
		var out map[string]string
		if res := do(t, call{server: k8sBase, path: path, bearer: nobody}, &out); res.StatusCode != http.StatusForbidden || !strings.Contains(out["error"], "may not get preparations") {
			t.Errorf("GET %s without a role: %d %v, want 403", path, res.StatusCode, out)
		}
	}
}

func TestRollbackDeploysWhatRanBeforeAndTheServingPageSaysWhat(t *testing.T) {
	ctx := context.Background()
	ns := "team-rollback"
	must(t, env.CreateNamespace(ctx, ns))
	repository := "127.0.0.1:1/" + ns + "/web"
	now := time.Now().UTC().Truncate(time.Second)
	rec := func(env string, clusters int32, ago time.Duration) v1.DeploymentRecord {
		return v1.DeploymentRecord{Environment: env, Clusters: clusters, Time: metav1.NewTime(now.Add(-ago)), Digest: "sha256:" + strings.Repeat("e", 64)}
	}
	// web-1 ran (twice), web-2 never did, web-3 runs; web-4, the newest, is not Ready.
	artifactPrep(t, ns, "web-1", "web", repository, "sha256:"+strings.Repeat("1", 64), "6.1.0", nil, rec("edge", 2, 48*time.Hour), rec("edge", 3, 24*time.Hour))
	nextSecond()
	artifactPrep(t, ns, "web-2", "web", repository, "sha256:"+strings.Repeat("2", 64), "6.2.0", nil)
	nextSecond()
	artifactPrep(t, ns, "web-3", "web", repository, "sha256:"+strings.Repeat("3", 64), "6.3.0", nil, rec("edge", 3, time.Hour))
	nextSecond()
	preparationOf(t, ns, "web-4", "web", false)
	orderAndServing(t, ns, "web", "edge", "web-3")

	d := get(t, servingPath(ns, "web"), func(d view.ServingDetail) error {
		if d.Promotion == nil || len(d.Promotion.Preparations) != 4 || d.Promotion.RollbackTo != "web-1" {
			return fmt.Errorf("promotion %+v, want 4 Preparations and web-1 to roll back to", d.Promotion)
		}
		return nil
	})
	byName := map[string]view.PreparationSummary{}
	for _, p := range d.Promotion.Preparations {
		byName[p.Name] = p
	}
	if deps := byName["web-1"].Deployments; len(deps) != 2 || deps[0].Clusters != 3 || !deps[0].Time.Equal(now.Add(-24*time.Hour)) || deps[1].Environment != "edge" || deps[1].Clusters != 2 {
		t.Errorf("web-1's deployments %+v, want the two records newest first", deps)
	}
	if deps := byName["web-2"].Deployments; deps == nil || len(deps) != 0 {
		t.Errorf("web-2's deployments %+v, want none", deps)
	}
	if c := byName["web-2"].Custody; !strings.HasPrefix(c, "no provenance") {
		t.Errorf("web-2's custody %q, want it to say it has no provenance", c)
	}

	path := servingPath(ns, "web") + "/rollback"
	// A viewer may not roll back.
	viewer := serviceAccountToken(t, ns, "viewer")
	bindClusterRole(t, ns, "view", ns, "viewer")
	var out map[string]any
	if res := do(t, call{server: k8sBase, method: http.MethodPost, path: path, bearer: viewer, body: server.RollbackRequest{}}, &out); res.StatusCode != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["error"]), "may not patch servings") {
		t.Errorf("rollback as a viewer: %d %v, want 403", res.StatusCode, out)
	}
	if sv := servingNamed(t, ns, "web"); sv.Spec.PreparationName != "web-3" {
		t.Fatalf("a viewer's rollback changed the Serving: %q", sv.Spec.PreparationName)
	}

	var done map[string]string
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.RollbackRequest{}}, &done); res.StatusCode != http.StatusOK ||
		done["serving"] != "web" || done["preparation"] != "web-1" || done["from"] != "web-3" {
		t.Fatalf("rollback: %d %v, want web-3 → web-1", res.StatusCode, done)
	}
	if sv := servingNamed(t, ns, "web"); sv.Spec.PreparationName != "web-1" {
		t.Fatalf("the Serving deploys %q after the rollback, want web-1", sv.Spec.PreparationName)
	}
	get(t, servingPath(ns, "web"), func(d view.ServingDetail) error {
		if d.Promotion == nil || d.Promotion.RollbackTo != "" {
			return fmt.Errorf("rollbackTo %q, want none past web-1", d.Promotion.RollbackTo)
		}
		return nil
	})

	for _, c := range []struct {
		to, want string
	}{
		{"", "to: nothing to roll back to: no Preparation older than web-1 has a deployment record (none ran healthily before it)"},
		{"web-4", "to: web-4 is not Ready"},
		{"web-1", "to: Serving web already deploys web-1"},
		{"web-9", `to: no Preparation "web-9"`},
	} {
		var refused fieldRefusal
		if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.RollbackRequest{To: c.to}}, &refused); res.StatusCode != http.StatusUnprocessableEntity ||
			!strings.HasPrefix(refused.Error, c.want) || len(refused.Fields) != 1 || refused.Fields[0].Field != "to" {
			t.Errorf("rollback to %q: %d %+v, want 422 %q", c.to, res.StatusCode, refused, c.want)
		}
	}
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.RollbackRequest{To: "web-2"}}, &done); res.StatusCode != http.StatusOK || done["preparation"] != "web-2" || done["from"] != "web-1" {
		t.Errorf("rollback to web-2: %d %v", res.StatusCode, done)
	}

	// An Automatic Order would undo it: 409, before anything is picked.
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auto"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
		Promotion: v1.Promotion{Mode: v1.PromotionAutomatic},
	}}))
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auto"}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "auto"}}}))
	deadline := time.Now().Add(waitFor)
	for {
		res := do(t, call{method: http.MethodPost, path: servingPath(ns, "auto") + "/rollback", bearer: token, body: server.RollbackRequest{}}, &out)
		if res.StatusCode == http.StatusConflict && strings.Contains(fmt.Sprint(out["error"]), "spec.promotion.mode to Manual") {
			break
		}
		if res.StatusCode != http.StatusNotFound || time.Now().After(deadline) { // the cache catches up
			t.Fatalf("rollback of an Automatic Order: %d %v, want 409", res.StatusCode, out)
		}
		time.Sleep(pollStep)
	}
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: map[string]string{"preparation": "web-1"}}, nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("a rollback with promote's body: %d, want 400", res.StatusCode)
	}
}

func servingNamed(t *testing.T, ns, name string) *v1.Serving {
	t.Helper()
	var sv v1.Serving
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sv))
	return &sv
}
