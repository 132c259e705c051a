//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/manifests"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// The fleet's plumbing on its own, without Kokumi's controllers: Argo CD pulls a rendered
// artifact of the demo chart from the bundled registry over plain HTTP (signed in as the puller
// of the namespace "plumbing", through a repository Secret of the project "default" that the
// test writes as the Serving reconciler does), syncs it to a member through a cluster Secret of the member's
// identity, and the member's kube-controller-manager, kube-scheduler and KWOK roll the
// Deployment out until its Pods are Ready.
func TestArgoCDSyncsAnArtifactOfTheBundledRegistryToAMember(t *testing.T) {
	ctx := context.Background()
	const ns, release = "plumbing", "plumbing"
	target := fleet.Member("edge-1")

	c := &oci.Client{Credentials: oci.Credentials{fleet.Registry: registryCreds.Pusher}}
	chart, err := c.Pull(ctx, demo.ChartURL, demo.ChartVersion)
	if err != nil {
		t.Fatal(err)
	}
	res, err := render.Render(ctx, chart.Layers, render.Options{ReleaseName: release, TargetNamespace: ns, RequireChart: true})
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := manifests.Marshal(res.Objects)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": manifests})
	if err != nil {
		t.Fatal(err)
	}
	repo := fleet.Registry + "/kokumi/plumbing/podinfo"
	digest, err := c.PushArtifact(ctx, repo, layer, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Only the namespace's puller (and Kokumi's) read it: a client without credentials does
	// not, nor another namespace's puller.
	if _, err := (&oci.Client{}).Pull(ctx, repo, digest); err == nil {
		t.Fatalf("an anonymous client pulled %s@%s from the bundled registry", repo, digest)
	}
	other := &oci.Client{Credentials: oci.Credentials{fleet.Registry: registryCreds.NamespacePuller("other")}}
	if _, err := other.Pull(ctx, repo, digest); err == nil {
		t.Fatalf("another namespace's puller pulled %s@%s from the bundled registry", repo, digest)
	}
	// The repository Secret the Serving reconciler writes, for this repository and the project
	// "default" alone; without Kokumi's labels, which the sweep of Servings that are gone reads.
	puller := registryCreds.NamespacePuller("plumbing")
	pullCreds := argocd.PullSecret{ArgoCDNamespace: fleet.ArgoCDNamespace, Serving: &metav1.ObjectMeta{Namespace: ns, Name: release},
		RepoURL: "oci://" + repo, Project: "default", Username: puller.Username, Password: puller.Password, PlainHTTP: true}.Secret()
	pullCreds.Name = "plumbing-registry"
	pullCreds.Labels = map[string]string{argocd.LabelSecretType: argocd.SecretTypeRepository}
	pullCreds.Annotations = nil

	secret, err := sandbox.ClusterSecret(fleet.ArgoCDNamespace, target)
	if err != nil {
		t.Fatal(err)
	}
	secret.Name = "plumbing-" + target.Name
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata":   map[string]any{"name": "plumbing", "namespace": fleet.ArgoCDNamespace},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": "oci://" + repo, "targetRevision": digest, "path": "."},
			"destination": map[string]any{"server": target.Server, "namespace": ns},
			"syncPolicy": map[string]any{
				"automated":   map[string]any{"prune": true, "selfHeal": true},
				"syncOptions": []any{"CreateNamespace=true"},
			},
		},
	}}
	for _, o := range []client.Object{pullCreds, secret, app} {
		if err := hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The Application has no resources finalizer: deleting it leaves the workload, which
		// goes with its namespace.
		for _, o := range []client.Object{app, secret, pullCreds} {
			if err := hub.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
		if err := member(t, target.Name).CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})

	start := time.Now()
	eventually(t, 2*time.Minute, "Argo CD syncs the Application", func(ctx context.Context) error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(app.GroupVersionKind())
		if err := hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		sync, _, _ := unstructured.NestedString(got.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(got.Object, "status", "health", "status")
		revision, _, _ := unstructured.NestedString(got.Object, "status", "sync", "revision")
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		if sync != "Synced" || health != "Healthy" || revision != digest {
			return fmt.Errorf("sync %q, health %q, revision %q (want %s), conditions %v", sync, health, revision, digest, conditions)
		}
		return nil
	})
	t.Logf("Argo CD synced and reported Healthy after %s", time.Since(start).Round(100*time.Millisecond))

	cs := member(t, target.Name)
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, release+"-podinfo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ReadyReplicas != 2 || d.Status.UpdatedReplicas != 2 {
		t.Errorf("the Deployment on %s has %d ready and %d updated replicas, want 2", target.Name, d.Status.ReadyReplicas, d.Status.UpdatedReplicas)
	}
	if image := d.Spec.Template.Spec.Containers[0].Image; image != demo.Image {
		t.Errorf("the Deployment runs %s, want %s", image, demo.Image)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" && p.Spec.NodeName == sandbox.NodeName {
				ready++
			}
		}
	}
	if ready != 2 {
		t.Errorf("%d Pods are Ready on %s's node, want 2", ready, target.Name)
	}
	// The other members run nothing of it.
	for _, other := range []string{"edge-2", "edge-3"} {
		if _, err := member(t, other).AppsV1().Deployments(ns).Get(ctx, release+"-podinfo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the Deployment is there too (%v)", other, err)
		}
	}

	t.Run("AnApplicationOfAnotherProjectCannotPullIt", func(t *testing.T) {
		anotherProjectPulls(t, "oci://"+repo, digest, target.Server)
	})
}

// anotherProjectPulls plays a tenant whose AppProject allows every source (or an admin's
// mistake in sourceRepos): an Application of that project names another namespace's artifact,
// repoURL at its digest, after Argo CD has read it for its own project. Argo CD finds no
// credentials for that project (the repository Secret is scoped to its own), the registry
// turns it away, and nothing of it reaches the member.
func anotherProjectPulls(t *testing.T, repoURL, digest, server string) {
	ctx := context.Background()
	const name = "intruder"
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "AppProject",
		"metadata":   map[string]any{"name": name, "namespace": fleet.ArgoCDNamespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata":   map[string]any{"name": name, "namespace": fleet.ArgoCDNamespace},
		"spec": map[string]any{
			"project":     name,
			"source":      map[string]any{"repoURL": repoURL, "targetRevision": digest, "path": "."},
			"destination": map[string]any{"server": server, "namespace": name},
			"syncPolicy": map[string]any{
				"automated":   map[string]any{"prune": true, "selfHeal": true},
				"syncOptions": []any{"CreateNamespace=true"},
			},
		},
	}}
	// The other project knows the registry speaks plain HTTP (an admin declared it for that
	// project, without credentials), so that what turns it away is the registry, not TLS.
	plain := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-registry", Namespace: fleet.ArgoCDNamespace, Labels: map[string]string{argocd.LabelSecretType: argocd.SecretTypeRepository}},
		StringData: map[string]string{"type": "oci", "url": repoURL, "project": name, "insecureOCIForceHttp": "true"},
	}
	for _, o := range []client.Object{project, plain, app} {
		if err := hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{app, plain, project} {
			if err := hub.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	})
	var message string
	eventually(t, 2*time.Minute, "Argo CD fails to read the artifact for the other project", func(ctx context.Context) error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(app.GroupVersionKind())
		if err := hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		if sync, _, _ := unstructured.NestedString(got.Object, "status", "sync", "status"); sync == "Synced" {
			t.Fatalf("an Application of another project synced %s@%s", repoURL, digest)
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			c, _ := c.(map[string]any)
			if c["type"] == "ComparisonError" {
				message, _ = c["message"].(string)
				return nil
			}
		}
		return fmt.Errorf("no ComparisonError yet (conditions %v)", conditions)
	})
	t.Logf("Argo CD, for the other project: %s", message)
	// The registry answers 401 with a Basic challenge, which Argo CD's OCI client reports as
	// "basic credential not found" when it holds none for the repository.
	if lower := strings.ToLower(message); !strings.Contains(lower, "basic credential not found") && !strings.Contains(lower, "401") && !strings.Contains(lower, "unauthorized") {
		t.Errorf("the other project's Application failed for another reason than the registry's refusal: %s", message)
	}
	if _, err := member(t, "edge-1").CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the other project's Application created its namespace on the member (%v)", err)
	}
}
