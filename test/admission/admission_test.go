// Package admission tests Kokumi's admission check of Argo CD Applications against a real
// kube-apiserver, which calls the check over HTTPS as a ValidatingWebhookConfiguration asks,
// and records signed and attached in a registry on loopback.
package admission

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/admission"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(m, &env)
}

const ns = "shop"

// world is a pipeline staging → prod (prod requires a verified record of staging) and an
// Environment dev that requires nothing, each with one Cluster (dev-1, staging-1, prod-1) and
// one Preparation of its Order, of the same release, pushed to a registry on loopback.
type world struct {
	registry          string
	staging, prod     *v1.Preparation
	dev               *v1.Preparation
	stagingRepository string
	trusted, stranger *record.Signer
	store             *record.Store
	// exempt are the repository prefixes the check exempts.
	exempt []string
}

// server is the API server URL of the Cluster name.
func server(name string) string { return "https://" + name + ".example.com:6443" }

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	reg := ocitest.Start(t)
	w := &world{registry: reg.Addr, trusted: recordtest.NewSigner(t), stranger: recordtest.NewSigner(t)}
	w.store = &record.Store{Client: &oci.Client{PlainHTTP: []string{w.registry}}}
	for _, n := range []string{ns, "argocd"} {
		if err := env.CreateNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, tier := range []string{"dev", "staging", "prod"} {
		must(t, env.Client.Create(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: tier + "-1", Labels: map[string]string{"tier": tier}},
			Spec: v1.ClusterSpec{Server: server(tier + "-1"), CredentialsRef: v1.LocalObjectReference{Name: tier + "-1"}}}))
	}
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "dev"}}, Project: "shop"}}))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "staging"},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "staging"}}, Project: "shop"}}))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}, Project: "shop",
			Requires: []v1.StageRequirement{{Environment: "staging", Verified: true}}}}))
	source := ocitest.PushBundle(t, reg.Addr+"/charts/app", "1.0.0", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"})
	prep := func(environment string) *v1.Preparation {
		order := "app-" + environment
		must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: order},
			Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "app"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
				Promotion: v1.Promotion{Mode: v1.PromotionManual}}}))
		repository := w.registry + "/kokumi/" + ns + "/" + order
		digest := ocitest.PushBundle(t, repository, "r1", map[string]string{"manifests.yaml": "# " + environment + "\n"})
		p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: order + "-1"}, Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "app"},
			Source:          v1.PreparationSource{URL: "oci://" + reg.Addr + "/charts/app", Version: "1.0.0", Digest: source},
			TargetNamespace: "app", Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
			ConfigHash: "h-" + environment, ConfigurationDigest: "sha256:" + strings.Repeat("c", 64),
		}}
		must(t, env.Client.Create(ctx, p))
		return p
	}
	w.staging, w.prod, w.dev = prep("staging"), prep("prod"), prep("dev")
	w.stagingRepository = w.registry + "/kokumi/" + ns + "/app-staging"
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serve starts the check over HTTPS on loopback, with a certificate it generates, and has the
// API server call it for Applications; it returns when the API server does.
func (w *world) serve(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys, err := record.ParseTrustedKeys(w.trusted.PublicKeyPEM())
	must(t, err)
	// The check reads as the ServiceAccount config/admission installs, with its RBAC: a read
	// the install does not grant fails the test.
	reader := shippedAccount(t)
	check := &admission.Check{Client: reader, Records: &stages.Pipeline{Client: reader, Records: &record.Store{Client: w.store.Client},
		Keys: admission.PublicKeys(keys), BundledRegistry: w.registry}, Exempt: w.exempt}
	dir := t.TempDir()
	ca, err := admission.GenerateCert(dir, "127.0.0.1")
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	must(t, l.Close())
	go func() {
		if err := admission.Serve(ctx, "127.0.0.1", port, dir, check); err != nil {
			t.Errorf("admission check: %v", err)
		}
	}()
	url := "https://127.0.0.1:" + strconv.Itoa(port) + admission.Path
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kokumi-admission"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "applications.admission.kokumi.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"argoproj.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"applications"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}}}
	must(t, env.Client.Create(ctx, cfg))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	// The API server reads webhook configurations from a cache of its own: wait until it asks.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.apply(t, "probe", w.prod.Spec.Artifact.Digest, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "admission webhook") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not call the check: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apply creates an Application in Argo CD's namespace that deploys prod's artifact at digest to
// the Cluster prod-1, as anyone allowed to write Applications could, bypassing Kokumi.
func (w *world) apply(t *testing.T, name, digest string, opts ...client.CreateOption) error {
	t.Helper()
	app := application(name, "oci://"+w.registry+"/kokumi/"+ns+"/app-prod", digest, server("prod-1"))
	return env.Client.Create(context.Background(), app, opts...)
}

// application is an Application of one source deploying to the cluster at server.
func application(name, repoURL, revision, server string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": name, "namespace": "argocd"},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": repoURL, "targetRevision": revision, "path": "."},
			"destination": map[string]any{"server": server, "namespace": "app"},
		},
	}}
}

// kokumis is the Application Kokumi's Serving of Order order writes for the Cluster name, at
// the Preparation prep's digest.
func (w *world) kokumis(order, clusterName string, prep *v1.Preparation) *unstructured.Unstructured {
	return argocd.ApplicationSpec{Name: order + "-" + clusterName, Namespace: "argocd", ServingNamespace: ns, ServingName: order,
		ServingUID: types.UID("uid-" + order), Cluster: clusterName, Project: "shop", RepoURL: "oci://" + w.registry + "/kokumi/" + ns + "/" + order,
		Revision: prep.Spec.Artifact.Digest, Server: server(clusterName), TargetNamespace: "app", Retry: argocd.DefaultSyncRetry}.Build()
}

// get reads the Application name.
func get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: "argocd", Name: name}, app))
	return app
}

func refused(t *testing.T, err error, mentions ...string) {
	t.Logf("refused: %v", err)
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want refused naming %q", mentions)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("refused with %q, which does not name %q", err, m)
		}
	}
}

func TestProdAdmitsOnlyWhatStagingVerified(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.exempt = []string{"https://git.example.com/platform/"}
	w.serve(t)
	prodDigest := w.prod.Spec.Artifact.Digest
	predicate := record.Predicate{Order: "app-staging", Namespace: ns, Environment: "staging", Preparation: w.staging.Name,
		TargetNamespace: "app", Clusters: []string{"staging-1"}, Time: time.Now(), Verified: true}

	t.Run("without staging's record", func(t *testing.T) {
		refused(t, w.apply(t, "prod-1", prodDigest), "requires a verified deployment record of Environment staging",
			"Preparation "+ns+"/"+w.prod.Name, "Promote this release through staging first")
		// Behind another source of a multi-source Application, too.
		multi := application("prod-multi", "https://git.example.com/platform/values.git", "main", server("prod-1"))
		spec := multi.Object["spec"].(map[string]any)
		spec["sources"] = []any{spec["source"], map[string]any{"repoURL": "oci://" + w.registry + "/kokumi/" + ns + "/app-prod", "targetRevision": prodDigest, "path": "."}}
		delete(spec, "source")
		refused(t, env.Client.Create(ctx, multi, client.DryRunAll), "requires a verified deployment record of Environment staging")
		// Kokumi's own Application, as the Serving writes it, too.
		refused(t, env.Client.Create(ctx, w.kokumis("app-prod", "prod-1", w.prod), client.DryRunAll),
			"Cluster prod-1, a member of Environment "+ns+"/prod", "requires a verified deployment record of Environment staging")
	})
	// The destination decides, not the Order that made the artifact: dev requires nothing, prod-1
	// is prod's.
	devArtifact := "oci://" + w.registry + "/kokumi/" + ns + "/app-dev"
	t.Run("dev's artifact to a prod Cluster", func(t *testing.T) {
		refused(t, env.Client.Create(ctx, application("dev-to-prod", devArtifact, w.dev.Spec.Artifact.Digest, server("prod-1"))),
			"Cluster prod-1, a member of Environment "+ns+"/prod", "requires a verified deployment record of Environment staging",
			"Preparation "+ns+"/"+w.dev.Name)
		// Named as Argo CD's cluster Secret names it, or by its server with a trailing slash.
		byName := application("dev-to-prod", devArtifact, w.dev.Spec.Artifact.Digest, "")
		must(t, unstructured.SetNestedMap(byName.Object, map[string]any{"name": "prod-1", "namespace": "app"}, "spec", "destination"))
		refused(t, env.Client.Create(ctx, byName), "Cluster prod-1, a member of Environment "+ns+"/prod")
		refused(t, env.Client.Create(ctx, application("dev-to-prod", devArtifact, w.dev.Spec.Artifact.Digest, server("prod-1")+"/")),
			"Cluster prod-1, a member of Environment "+ns+"/prod")
		// A Cluster being deleted has left its Environment, but Argo CD still reaches it.
		leaving := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-2", Labels: map[string]string{"tier": "prod"}, Finalizers: []string{"test.kokumi.dev/hold"}},
			Spec: v1.ClusterSpec{Server: server("prod-2"), CredentialsRef: v1.LocalObjectReference{Name: "prod-2"}}}
		must(t, env.Client.Create(ctx, leaving))
		must(t, env.Client.Delete(ctx, leaving))
		refused(t, env.Client.Create(ctx, application("dev-to-prod", devArtifact, w.dev.Spec.Artifact.Digest, server("prod-2"))),
			"Cluster prod-2, a member of Environment "+ns+"/prod")
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(leaving), leaving))
		leaving.Finalizers = nil
		must(t, env.Client.Update(ctx, leaving))
		// To dev's own Cluster it goes.
		must(t, env.Client.Create(ctx, application("dev-1", devArtifact, w.dev.Spec.Artifact.Digest, server("dev-1"))))
	})
	t.Run("an update that moves an admitted Application to a prod Cluster", func(t *testing.T) {
		must(t, env.Client.Create(ctx, application("dev-moved", devArtifact, w.dev.Spec.Artifact.Digest, server("dev-1"))))
		app := get(t, "dev-moved")
		must(t, unstructured.SetNestedField(app.Object, server("prod-1"), "spec", "destination", "server"))
		refused(t, env.Client.Update(ctx, app), "Cluster prod-1, a member of Environment "+ns+"/prod", "Environment staging")
		app = get(t, "dev-moved")
		must(t, unstructured.SetNestedMap(app.Object, map[string]any{"name": "prod-1", "namespace": "app"}, "spec", "destination"))
		refused(t, env.Client.Update(ctx, app), "Cluster prod-1, a member of Environment "+ns+"/prod")
	})
	t.Run("a source that is no Preparation to a prod Cluster", func(t *testing.T) {
		refused(t, env.Client.Create(ctx, application("git-to-prod", "https://git.example.com/app.git", "main", server("prod-1"))),
			"deploys https://git.example.com/app.git to Cluster prod-1, a member of Environment "+ns+"/prod", "--exempt-repositories")
		// A prefix exempts what continues it after a "/", nothing else.
		refused(t, env.Client.Create(ctx, application("git-to-prod", "https://git.example.com/platform-evil/addons.git", "main", server("prod-1"))),
			"--exempt-repositories")
		// Behind Argo CD's source hydrator, too.
		hydrated := application("hydrated-prod", "", "", server("prod-1"))
		spec := hydrated.Object["spec"].(map[string]any)
		delete(spec, "source")
		spec["sourceHydrator"] = map[string]any{
			"drySource":  map[string]any{"repoURL": "https://git.example.com/app.git", "targetRevision": "main", "path": "."},
			"syncSource": map[string]any{"targetBranch": "env/prod", "path": "prod"},
		}
		refused(t, env.Client.Create(ctx, hydrated), "deploys https://git.example.com/app.git to Cluster prod-1", "--exempt-repositories")
		must(t, env.Client.Create(ctx, application("addons-prod", "https://git.example.com/platform/addons.git", "main", server("prod-1"))))
		// An exempt Application moved to a source that is not is checked.
		app := get(t, "addons-prod")
		must(t, unstructured.SetNestedField(app.Object, "https://git.example.com/app.git", "spec", "source", "repoURL"))
		refused(t, env.Client.Update(ctx, app), "--exempt-repositories")
	})
	t.Run("a record signed by another key", func(t *testing.T) {
		_, err := w.store.Attach(ctx, w.stagingRepository, w.staging.Spec.Artifact.Digest, w.stranger, predicate)
		must(t, err)
		refused(t, w.apply(t, "prod-1", prodDigest), "Environment staging", "no verified record")
	})
	t.Run("a record of another digest", func(t *testing.T) {
		envelope, err := record.Envelope(ctx, w.stagingRepository, prodDigest, w.trusted, predicate)
		must(t, err)
		_, err = w.store.AttachEnvelope(ctx, w.stagingRepository, w.staging.Spec.Artifact.Digest, record.PredicateType, envelope)
		must(t, err)
		refused(t, w.apply(t, "prod-1", prodDigest), "Environment staging", "no verified record")
	})
	t.Run("a record that does not say verified", func(t *testing.T) {
		unverified := predicate
		unverified.Verified = false
		_, err := w.store.Attach(ctx, w.stagingRepository, w.staging.Spec.Artifact.Digest, w.trusted, unverified)
		must(t, err)
		refused(t, w.apply(t, "prod-1", prodDigest), "Environment staging", "not verified")
	})
	t.Run("an artifact that is no Preparation", func(t *testing.T) {
		other := ocitest.PushBundle(t, w.registry+"/kokumi/"+ns+"/app-prod", "forged", map[string]string{"manifests.yaml": "# forged\n"})
		refused(t, w.apply(t, "prod-forged", other), "is no Preparation of Order "+ns+"/app-prod")
	})
	t.Run("with staging's verified record", func(t *testing.T) {
		_, err := w.store.Attach(ctx, w.stagingRepository, w.staging.Spec.Artifact.Digest, w.trusted, predicate)
		must(t, err)
		must(t, w.apply(t, "prod-1", prodDigest))
		must(t, env.Client.Create(ctx, w.kokumis("app-prod", "prod-1", w.prod)))
		// Updates that deploy the same artifact are admitted without a look; another is checked.
		app := get(t, "prod-1")
		app.SetLabels(map[string]string{"touched": "yes"})
		must(t, env.Client.Update(ctx, app))
		must(t, unstructured.SetNestedField(app.Object, "sha256:"+strings.Repeat("0", 64), "spec", "source", "targetRevision"))
		refused(t, env.Client.Update(ctx, app), "is no Preparation of Order "+ns+"/app-prod")
	})
	t.Run("what changes an admitted Preparation's manifests on a prod Cluster", func(t *testing.T) {
		app := get(t, "prod-1")
		must(t, unstructured.SetNestedMap(app.Object, map[string]any{"namePrefix": "x-"}, "spec", "source", "kustomize"))
		refused(t, env.Client.Update(ctx, app), "with the source fields kustomize,path,repoURL,targetRevision to Cluster prod-1")
		app = get(t, "prod-1")
		must(t, unstructured.SetNestedField(app.Object, "other", "spec", "source", "path"))
		refused(t, env.Client.Update(ctx, app), "path,repoURL,targetRevision to Cluster prod-1")
	})
	t.Run("an operation that syncs something else to a prod Cluster", func(t *testing.T) {
		// A sync to another revision of prod's repository: that revision is judged.
		app := get(t, "prod-1")
		must(t, unstructured.SetNestedMap(app.Object, map[string]any{"sync": map[string]any{"revision": w.dev.Spec.Artifact.Digest}}, "operation"))
		refused(t, env.Client.Update(ctx, app), "is no Preparation of Order "+ns+"/app-prod")
		// A rollback's source: judged as a source.
		app = get(t, "prod-1")
		must(t, unstructured.SetNestedMap(app.Object, map[string]any{"sync": map[string]any{
			"source": map[string]any{"repoURL": "https://git.example.com/app.git", "targetRevision": "main", "path": "."}}}, "operation"))
		refused(t, env.Client.Update(ctx, app), "deploys https://git.example.com/app.git to Cluster prod-1", "--exempt-repositories")
		// Argo CD's automated sync, at the revision the spec names, and its end.
		app = get(t, "prod-1")
		must(t, unstructured.SetNestedMap(app.Object, map[string]any{"sync": map[string]any{"revision": prodDigest, "prune": true},
			"initiatedBy": map[string]any{"automated": true}}, "operation"))
		must(t, env.Client.Update(ctx, app))
		app = get(t, "prod-1")
		must(t, unstructured.SetNestedField(app.Object, strings.TrimPrefix(prodDigest, "sha256:"), "operation", "sync", "revision"))
		must(t, env.Client.Update(ctx, app))
		app = get(t, "prod-1")
		unstructured.RemoveNestedField(app.Object, "operation")
		must(t, env.Client.Update(ctx, app))
	})
	t.Run("an Application of no Kokumi artifact is not Kokumi's to judge", func(t *testing.T) {
		// Its destination is no Kokumi Cluster.
		must(t, env.Client.Create(ctx, application("elsewhere", "https://git.example.com/app.git", "main", v1.InClusterServer)))
	})
	t.Run("staging itself requires nothing", func(t *testing.T) {
		must(t, env.Client.Create(ctx, w.kokumis("app-staging", "staging-1", w.staging)))
		must(t, env.Client.Create(ctx, application("staging-git", "https://git.example.com/app.git", "main", server("staging-1"))))
	})
}

// shippedAccount applies config/admission (its RBAC for real, the rest with a server-side dry
// run: no Service answers in this API server) and returns a client acting as its
// ServiceAccount.
func shippedAccount(t *testing.T) client.Client {
	t.Helper()
	ctx := context.Background()
	must(t, env.CreateNamespace(ctx, "kokumi-system"))
	if out, err := env.Kubectl(ctx, "apply", "--server-side", "--dry-run=server", "-k", "../../config/admission"); err != nil {
		t.Fatalf("config/admission does not apply: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(ctx, "apply", "--server-side", "-f", "../../config/admission/rbac.yaml"); err != nil {
		t.Fatalf("config/admission/rbac.yaml does not apply: %v\n%s", err, out)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kokumi-system:kokumi-admission"}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	return c
}
