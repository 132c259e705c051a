package serving

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// addFinalizer gives cluster's Application the finalizer, as an admin or a tool would.
func (f *fixture) addFinalizer(cluster, finalizer string) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		app, err := f.app(cluster)
		if err != nil {
			return err
		}
		app.SetFinalizers(append(app.GetFinalizers(), finalizer))
		return env.Client.Update(f.ctx, app)
	}))
}

// goneWithoutCascade waits for cluster's Application to be gone, and fails at once if it is seen
// deleted while it carries a resources finalizer: Argo CD would then delete what runs on the
// cluster with it. (The test API server runs no Argo CD, so such an Application would stay
// Terminating for ever.)
func (f *fixture) goneWithoutCascade(cluster string) {
	f.t.Helper()
	f.eventually("the Application of "+cluster+" is gone", func() error {
		app, err := f.app(cluster)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if app.GetDeletionTimestamp() != nil {
			for _, fin := range app.GetFinalizers() {
				if slices.Contains(argocd.CascadeFinalizers, fin) {
					f.t.Fatalf("the Application of %s was deleted carrying %s: Argo CD would delete what runs on the cluster", cluster, fin)
				}
			}
		}
		return fmt.Errorf("still there (finalizers %v)", app.GetFinalizers())
	})
}

// An Application someone gave a resources finalizer after Kokumi's last write (here while a
// gate holds the Serving, so that Kokumi writes none of its Applications) loses it before Kokumi
// deletes it, whether its cluster leaves or its Serving is deleted: what runs there keeps running.
func TestAnApplicationGivenTheResourcesFinalizerIsDeletedWithoutIt(t *testing.T) {
	f := newFixture(t)
	f.cluster("a30", true)
	leaving := f.cluster("b30", true)
	f.cluster("c30", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	s := f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a30", "b30", "c30")
	f.ready(v1.ReasonDeployed, "to a30, b30, c30")

	f.promote("podinfo-edge-missing")
	f.ready(v1.ReasonPreparationNotFound, "podinfo-edge-missing does not exist")
	f.addFinalizer("b30", argocd.ResourcesFinalizer)
	f.addFinalizer("c30", argocd.ResourcesFinalizerForeground)
	f.addFinalizer("a30", argocd.ResourcesFinalizerBackground)

	// b30 leaves the Environment.
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(leaving), leaving))
	leaving.Labels["tier"] = "elsewhere"
	must(t, env.Client.Update(f.ctx, leaving))
	f.goneWithoutCascade("b30")
	for _, c := range []string{"a30", "c30"} {
		if _, err := f.app(c); err != nil {
			t.Fatalf("the Application of %s, whose cluster stays, is gone: %v", c, err)
		}
	}

	// The Serving is deleted.
	must(t, env.Client.Delete(f.ctx, s))
	f.goneWithoutCascade("a30")
	f.goneWithoutCascade("c30")
}

// Kokumi owns the whole spec of its Applications: spec.sources (which Argo CD would deploy
// instead of spec.source), spec.ignoreDifferences (which would hide drift from self-heal) and
// any other field someone adds are removed, and the Application is put back to what Kokumi
// writes; once it is, a quiet resync writes nothing.
func TestSpecFieldsSomeoneAddsToAnApplicationAreRemoved(t *testing.T) {
	f := newFixture(t)
	f.cluster("a31", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a31")
	f.ready(v1.ReasonDeployed, "to a31")
	app, err := f.app("a31")
	must(t, err)
	written := app.Object["spec"]

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		app, err := f.app("a31")
		if err != nil {
			return err
		}
		spec := app.Object["spec"].(map[string]any)
		spec["sources"] = []any{map[string]any{"repoURL": "oci://evil.example/podinfo", "targetRevision": "latest", "path": "."}}
		spec["ignoreDifferences"] = []any{map[string]any{"group": "apps", "kind": "Deployment", "jsonPointers": []any{"/spec/template"}}}
		spec["revisionHistoryLimit"] = int64(0)
		return env.Client.Update(f.ctx, app)
	}))
	var corrected *unstructured.Unstructured
	f.eventually("the Application is put back to what Kokumi writes", func() error {
		if corrected, err = f.app("a31"); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(corrected.Object["spec"], written) {
			return fmt.Errorf("spec is %v, want %v", corrected.Object["spec"], written)
		}
		return nil
	})
	if status, _, _ := unstructured.NestedString(corrected.Object, "status", "health", "status"); status != argocd.HealthHealthy {
		t.Errorf("Argo CD's status was not kept: health %q", status)
	}

	// Put back, it is as wanted: a quiet resync from the caches writes nothing.
	f.settled()
	f.eventually("the cache holds the Application put back", func() error {
		var cached argocd.Application
		if err := argo.Cache.Get(f.ctx, client.ObjectKeyFromObject(corrected), &cached); err != nil {
			return err
		}
		live, err := f.app("a31")
		if err != nil {
			return err
		}
		if cached.ResourceVersion != live.GetResourceVersion() {
			return fmt.Errorf("cache at %s, API server at %s", cached.ResourceVersion, live.GetResourceVersion())
		}
		return nil
	})
	// The controller may still be catching up with the events of the drift and its repair on a
	// loaded machine: a resync that writes is tried again once the caches hold its write, and the
	// last of three must write nothing (one that writes each time fails).
	var what string
	for attempt := range 3 {
		var writes writeCounter
		r := reconciler(writes.client(cachedClient()))
		for range 3 {
			if _, err := r.Reconcile(f.ctx, f.request()); err != nil {
				t.Fatal(err)
			}
		}
		if writes.n.Load() == 0 {
			return
		}
		what = writes.what()
		t.Logf("resync %d after the drift was put back wrote: %s", attempt+1, what)
		f.settled()
		time.Sleep(time.Second)
	}
	t.Errorf("every quiet resync after the drift was put back wrote, the last: %s", what)
}
