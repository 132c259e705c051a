package serving

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
)

// SweepInterval is how often the Serving reconciler walks Kokumi's Applications for those
// whose Serving is gone, beyond the watch that finds them as they come and go: a controller
// that was down when a Serving went, or a backup restored without its Servings, leaves them.
const SweepInterval = 10 * time.Minute

// ReasonOrphanDeleted is the reason of the Event of an Application deleted because its Serving
// is gone.
const ReasonOrphanDeleted = "OrphanDeleted"

// sweep deletes the Applications Kokumi labelled for the Serving key that a Serving which is gone
// left (argocd.Orphaned); what runs on their clusters keeps running. cached is the Serving as the
// cache holds it (nil when it holds none): nothing is read from the API server unless the cache
// suggests an orphan, and then the Serving is read from the API server right before the deletes,
// so that a Serving the cache has not seen yet keeps its Applications. Each delete carries the
// Application's UID.
func (r *Reconciler) sweep(ctx context.Context, key types.NamespacedName, cached *v1.Serving) error {
	list := &argocd.ApplicationList{}
	if err := r.ArgoCD.ListApplications(ctx, list, r.Config.ArgoCDNamespace, client.MatchingLabels{
		argocd.LabelServing: key.Name, argocd.LabelServingNamespace: key.Namespace,
	}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("list Applications of Serving %s: %w", key, err)
	}
	secretLeft := r.PullSecrets != nil && r.PullSecrets.Orphaned(ctx, key, asObject(cached))
	if len(orphans(list.Items, key, cached)) == 0 && !secretLeft {
		return nil
	}
	live := &v1.Serving{}
	if err := r.apiReader().Get(ctx, key, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return fmt.Errorf("read Serving %s before deleting the Applications it left: %w", key, err)
	}
	gone := orphans(list.Items, key, live)
	errs := r.deleteApplications(ctx, gone)
	if secretLeft {
		// After the Applications, which read through it.
		errs = append(errs, r.PullSecrets.Remove(ctx, key, asObject(live)))
	}
	for i, app := range gone {
		if errs[i] != nil {
			continue
		}
		kmetrics.OrphanDeleted()
		// On the Serving that is gone, in its namespace, where its team looks.
		was := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: types.UID(app.Labels[argocd.LabelServingUID])}}
		was.SetGroupVersionKind(v1.GroupVersion.WithKind("Serving"))
		r.Recorder.Eventf(was, clusterRef(app.Labels[argocd.LabelCluster]), corev1.EventTypeWarning, ReasonOrphanDeleted, "DeleteApplication",
			"Deleted Argo CD Application %s: Serving %s it was written for (UID %s) is gone; what runs on the cluster keeps running",
			app.Name, key, app.Labels[argocd.LabelServingUID])
	}
	return errors.Join(errs...)
}

// orphans returns the apps, labelled for the Serving key, that serving (nil: none of that name)
// did not write and that a Serving which is gone did.
func orphans(apps []argocd.Application, key types.NamespacedName, serving *v1.Serving) []*argocd.Application {
	owner := asObject(serving)
	var out []*argocd.Application
	for i := range apps {
		if argocd.Orphaned(&apps[i], key.Namespace, key.Name, owner) {
			out = append(out, &apps[i])
		}
	}
	return out
}

// asObject is serving as a metav1.Object: nil (no Serving) when serving is nil.
func asObject(serving *v1.Serving) metav1.Object {
	if serving == nil {
		return nil
	}
	return serving
}

// sweepAll walks Kokumi's Applications of this shard, from the cache, and sweeps those of each
// Serving they name (sweep reads nothing more unless the cache suggests an orphan).
func (r *Reconciler) sweepAll(ctx context.Context) error {
	if !r.ArgoCD.Installed() {
		return nil
	}
	list := &argocd.ApplicationList{}
	if err := r.ArgoCD.ListApplications(ctx, list, r.Config.ArgoCDNamespace, client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("list Kokumi's Applications: %w", err)
	}
	servings := map[types.NamespacedName]bool{}
	for i := range list.Items {
		l := list.Items[i].Labels
		if key := (types.NamespacedName{Namespace: l[argocd.LabelServingNamespace], Name: l[argocd.LabelServing]}); key.Name != "" && key.Namespace != "" {
			servings[key] = true
		}
	}
	if r.PullSecrets != nil {
		// The repository Secrets too: a Serving may have left its Secret and no Application.
		keys, err := r.PullSecrets.Servings(ctx)
		if err != nil {
			return err
		}
		for _, key := range keys {
			servings[key] = true
		}
	}
	var errs []error
	for key := range servings {
		var cached *v1.Serving
		s := &v1.Serving{}
		switch err := r.Get(ctx, key, s); {
		case err == nil:
			cached = s
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("read Serving %s: %w", key, err))
			continue
		}
		errs = append(errs, r.sweep(ctx, key, cached))
	}
	return errors.Join(errs...)
}

// sweeper runs sweepAll every SweepInterval, on the leader only.
func (r *Reconciler) sweeper(ctx context.Context) error {
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.sweepAll(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "sweep the Applications of Servings that are gone")
			}
		}
	}
}
