package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/rollout/writes"
	"github.com/kokumi-dev/kokumi/internal/shard"
)

// apply writes and removes the Applications the decisions ask for, at most
// Config.ApplicationWriters at a time, and those of the slice only (the rest wait for the next
// reconcile), and returns what became of each (fleet.AfterWrites folds them in). A failed write
// never stops the others; the errors are also returned together. One Event names the clusters
// whose Applications it created.
func (r *Reconciler) apply(ctx context.Context, s *v1.Serving, decisions []fleet.Decision, byName map[string]*argocd.Application, slice *writes.Slice) ([]fleet.WriteResult, error) {
	errs := make([]error, len(decisions))
	ran := make([]bool, len(decisions))
	w := r.writers()
	for i := range decisions {
		d := &decisions[i]
		existing := byName[d.Application]
		var op func() error
		switch {
		case d.Write:
			op = func() error { return r.writeApplication(ctx, s, *d, existing) }
		case d.Remove && existing != nil && argocd.BelongsTo(existing, s):
			op = func() error { return r.deleteApplication(ctx, existing) }
		default:
			continue
		}
		if !slice.Take(d) {
			continue
		}
		ran[i] = true
		w.Run(func() { errs[i] = op() })
	}
	w.Wait()
	var joined []string
	for i := range decisions {
		if !ran[i] || errs[i] != nil {
			continue
		}
		existing := byName[decisions[i].Application]
		if decisions[i].Write && existing == nil {
			joined = append(joined, decisions[i].Cluster)
		}
		slice.Wrote(&decisions[i], existing)
	}
	r.writes.Record(slice)
	r.joinedEvent(s, joined)
	results := make([]fleet.WriteResult, len(decisions))
	for i, err := range errs {
		if errors.Is(err, errNotOurs) {
			results[i].NotOurs, errs[i] = true, nil
			continue
		}
		results[i].Err = err
	}
	return results, errors.Join(errs...)
}

// errNotOurs says that an Application of the name Kokumi would create exists and is not the
// Serving's.
var errNotOurs = errors.New("the Application exists and is not Kokumi's")

// writeApplication creates the Application of decision d, or updates existing to it. A create
// that finds one of that name the cache does not hold reads it from the API server: the
// Serving's own (labelled for another shard, or not cached yet) is updated, and any other is
// remembered and left alone (errNotOurs).
func (r *Reconciler) writeApplication(ctx context.Context, s *v1.Serving, d fleet.Decision, existing *argocd.Application) (err error) {
	start := time.Now()
	defer func() {
		if !errors.Is(err, errNotOurs) {
			kmetrics.ObserveApplicationWrite(err, time.Since(start))
		}
	}()
	if existing == nil {
		app := d.Spec.New()
		shard.SetApplication(app, r.Config.Shard)
		body, err := json.Marshal(app)
		if err != nil {
			return fmt.Errorf("encode Application %q for Cluster %s: %w", d.Application, d.Cluster, err)
		}
		// The answer, the Application as created, is not decoded: the watch brings it.
		err = r.ArgoCD.Writer.Create(ctx, app.Namespace, body)
		if err == nil {
			return nil // apply records one Event for the clusters that joined
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Application %q for Cluster %s: %w", d.Application, d.Cluster, err)
		}
		live := &argocd.Application{}
		if err := r.ArgoCD.Reader.Get(ctx, client.ObjectKeyFromObject(app), live); err != nil {
			return fmt.Errorf("read Application %q for Cluster %s, which exists: %w", d.Application, d.Cluster, err)
		}
		if !argocd.BelongsTo(live, s) {
			r.writes.RememberForeign(client.ObjectKeyFromObject(s), live, time.Now())
			return errNotOurs
		}
		existing = live
	}
	app := existing.DeepCopy()
	d.Spec.Apply(app)
	shard.SetApplication(app, r.Config.Shard)
	// A merge patch from the cached copy, never an Update: the cache holds what Kokumi reads of
	// an Application (argocd.Application), and the Application CRD has no status subresource, so
	// writing one whole would wipe Argo CD's status. The lock keeps the old Update's conflict on
	// a stale copy. The answer is not decoded: the watch brings it.
	patch, err := argocd.MergePatch(existing, app)
	if err != nil {
		return fmt.Errorf("compute the patch of Application %q for Cluster %s: %w", d.Application, d.Cluster, err)
	}
	if err := r.ArgoCD.Writer.Patch(ctx, app.Namespace, app.Name, types.MergePatchType, patch); err != nil {
		return fmt.Errorf("update Application %q for Cluster %s: %w", d.Application, d.Cluster, err)
	}
	return nil
}

// deleteApplication deletes app, as Kokumi read it, so that what runs on its cluster keeps
// running; every delete of an Application goes through it. An Application someone gave one of
// Argo CD's resources finalizers (argocd.CascadeFinalizers) after Kokumi last wrote it would make
// Argo CD delete what it deployed: the finalizer is patched away first, at the UID and
// resourceVersion read, so that a change made meanwhile is not overwritten. The delete carries the UID and the
// resourceVersion Kokumi read or patched it at: an Application that changed since, such as one
// given the finalizer after the cache's copy, is not deleted but tried again, as it is then.
func (r *Reconciler) deleteApplication(ctx context.Context, app *argocd.Application) error {
	if argocd.Cascades(app) {
		// A JSON patch that applies only to the Application at the UID and resourceVersion read:
		// anything changed since, a finalizer added among them, fails it (a conflict).
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": app.UID},
			{"op": "test", "path": "/metadata/resourceVersion", "value": app.ResourceVersion},
			{"op": "replace", "path": "/metadata/finalizers", "value": argocd.WithoutCascade(app.Finalizers)},
		})
		if err != nil {
			return fmt.Errorf("remove the resources finalizer of Application %q: %w", app.Name, err)
		}
		stripped := app.DeepCopy()
		err = r.Patch(ctx, stripped, client.RawPatch(types.JSONPatchType, patch))
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("remove the resources finalizer of Application %q before deleting it: %w", app.Name, err)
		}
		app = stripped
	}
	unchanged := metav1.Preconditions{UID: ptr.To(app.UID)}
	if app.ResourceVersion != "" {
		unchanged.ResourceVersion = ptr.To(app.ResourceVersion)
	}
	// The answer is not read: the watch brings the delete.
	err := r.ArgoCD.Writer.Delete(ctx, app.Namespace, app.Name, unchanged)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("delete Application %q: it changed since it was read, and is deleted as it is now on the next try: %w", app.Name, err)
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Application %q: %w", app.Name, err)
	}
	return nil
}

// clusterRef is the Cluster an event relates to; events of one reason stay apart per Cluster.
func clusterRef(name string) *v1.Cluster {
	c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	c.SetGroupVersionKind(v1.GroupVersion.WithKind("Cluster"))
	return c
}

// applications lists the Serving's own Applications.
func (r *Reconciler) applications(ctx context.Context, s *v1.Serving) ([]argocd.Application, error) {
	list := &argocd.ApplicationList{}
	// By index, not a walk of the namespace. Read-only: writes go to copies (writeApplication),
	// so the cache's objects are not copied.
	if err := r.ArgoCD.ListApplications(ctx, list, r.Config.ArgoCDNamespace, client.MatchingLabels{
		argocd.LabelServing: s.Name, argocd.LabelServingNamespace: s.Namespace,
	}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list Applications of Serving %s/%s: %w", s.Namespace, s.Name, err)
	}
	// Filtered in place: the list is this reconcile's copy, and a fleet's is thousands long.
	out := list.Items[:0]
	left := false
	for i := range list.Items {
		app := &list.Items[i]
		if argocd.BelongsTo(app, s) {
			out = append(out, *app)
		} else {
			left = left || argocd.Orphaned(app, s.Namespace, s.Name, s)
		}
	}
	if left {
		// A former Serving of this name wrote them: they go, and this one writes its own.
		if err := r.sweep(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// removeDepartures deletes the Serving's Applications of clusters its Environment no longer
// selects, with one Event naming them; what runs there keeps running.
func (r *Reconciler) removeDepartures(ctx context.Context, s *v1.Serving, tgt target) error {
	ours, err := r.applications(ctx, s)
	if err != nil {
		return err
	}
	byName := make(map[string]*argocd.Application, len(ours))
	names := make([]string, len(ours))
	for i := range ours {
		byName[ours[i].Name], names[i] = &ours[i], ours[i].Name
	}
	// One failed delete does not keep the others, nor the rest of the reconcile, waiting.
	leaving := fleet.Leaving(s.Namespace, s.Name, tgt.clusters, names)
	apps := make([]*argocd.Application, len(leaving))
	for i, name := range leaving {
		apps[i] = byName[name]
	}
	errs := r.deleteApplications(ctx, apps)
	var left, deleted []string
	for i, app := range apps {
		if errs[i] == nil {
			left, deleted = append(left, app.Labels[argocd.LabelCluster]), append(deleted, app.Name)
		}
	}
	r.leftEvent(s, tgt.environment, left, deleted)
	return errors.Join(errs...)
}

// removeApplications deletes every Application of the Serving and says so once.
func (r *Reconciler) removeApplications(ctx context.Context, s *v1.Serving, why string) error {
	ours, err := r.applications(ctx, s)
	if err != nil {
		return err
	}
	apps := make([]*argocd.Application, len(ours))
	for i := range ours {
		apps[i] = &ours[i]
	}
	errs := r.deleteApplications(ctx, apps)
	deleted := 0
	for _, err := range errs {
		if err == nil {
			deleted++
		}
	}
	if deleted > 0 {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, "ApplicationsDeleted", "DeleteApplications",
			"%s: deleted %d Argo CD Applications; what runs on the clusters keeps running", why, deleted)
	}
	return errors.Join(errs...)
}

// deleteApplications deletes apps, Config.ApplicationWriters at a time, and returns the error
// of each delete (nil for one that went through); one failed delete does not stop the others.
func (r *Reconciler) deleteApplications(ctx context.Context, apps []*argocd.Application) []error {
	errs := make([]error, len(apps))
	w := r.writers()
	for i, app := range apps {
		w.Run(func() { errs[i] = r.deleteApplication(ctx, app) })
	}
	w.Wait()
	return errs
}

// writers returns a pool of Config.ApplicationWriters (at least one).
func (r *Reconciler) writers() *writes.Writers {
	return writes.NewWriters(r.Config.ApplicationWriters)
}
