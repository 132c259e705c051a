// Package gc holds the collector of an Order's old Preparations and their artifacts.
package gc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// ReasonPreparationsCollected is the reason of the event an Order gets when old Preparations
// of it are deleted.
const ReasonPreparationsCollected = "PreparationsCollected"

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=preparations,verbs=get;list;watch;delete

// Setup registers the Collector, unless cfg.PreparationHistory keeps every
// Preparation.
func Setup(mgr ctrl.Manager, cfg config.Config) error {
	if cfg.PreparationHistory <= 0 {
		return nil
	}
	r := &Collector{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kokumi-gc"),
		Config: cfg, Registry: bundled.Pusher(mgr.GetAPIReader(), cfg)}
	return r.SetupWithManager(mgr)
}

// Collector keeps each Order's newest Config.PreparationHistory Preparations and
// deletes the older ones with their artifacts in the bundled registry (the manifest and its
// deployment records), oldest first. It never deletes the Order's latest Preparation, the one
// its Serving names, nor one whose artifact its Serving or one of its clusters runs. Those
// also cover every promotion pipeline: a stage's evidence is what the stage's Serving names
// and runs (Pipeline.run), and the Order waiting for it has its own latest Preparation. An
// Order with no more than its history is only read.
type Collector struct {
	// Client reads Orders, Preparations and Servings from the cache, and deletes Preparations.
	Client client.Client
	// Reader reads the Order and its Serving again from the API server before anything is
	// deleted.
	Reader client.Reader
	// Recorder records an event on the Order for what was deleted.
	Recorder events.EventRecorder
	// Config gives the history and the bundled registry.
	Config config.Config
	// Registry deletes artifacts in the bundled registry, signed in as the pusher.
	Registry *oci.Client
}

// SetupWithManager registers the collector: it looks at an Order when the Order's latest
// Preparation changes, a Preparation of it is made, or its Serving names or runs another.
func (r *Collector) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("preparation-gc").
		For(&v1.Order{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.(*v1.Order).Status.LatestPreparation != e.ObjectNew.(*v1.Order).Status.LatestPreparation
			},
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Watches(&v1.Preparation{}, handler.EnqueueRequestsFromMapFunc(orderOfPreparation), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Watches(&v1.Serving{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, n := e.ObjectOld.(*v1.Serving), e.ObjectNew.(*v1.Serving)
				return o.Spec.PreparationName != n.Spec.PreparationName || !slices.Equal(preparation.Runs(o), preparation.Runs(n))
			},
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		// Collecting is never urgent: one Order at a time.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up the collector of old Preparations: %w", err)
	}
	return nil
}

func orderOfPreparation(_ context.Context, o client.Object) []reconcile.Request {
	p := o.(*v1.Preparation)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.OrderRef.Name}}}
}

// Reconcile deletes the Order's Preparations beyond its history that nothing keeps.
func (r *Collector) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var order v1.Order
	if err := r.Client.Get(ctx, req.NamespacedName, &order); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !order.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var list v1.PreparationList
	if err := r.Client.List(ctx, &list, client.InNamespace(order.Namespace), client.MatchingLabels{preparation.LabelOrder: order.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list Preparations of Order %s/%s: %w", order.Namespace, order.Name, err)
	}
	preps := ownPreparations(&list, &order)
	if len(preps) <= r.Config.PreparationHistory {
		return ctrl.Result{}, nil
	}
	// Renders still landing (a Preparation made in the last gcQuiet) are let settle first.
	if wait := gcQuiet - time.Since(newest(preps)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	// Over the history: what goes is decided on what the API server holds, not on the cache.
	list = v1.PreparationList{}
	if err := r.Reader.List(ctx, &list, client.InNamespace(order.Namespace), client.MatchingLabels{preparation.LabelOrder: order.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list Preparations of Order %s/%s: %w", order.Namespace, order.Name, err)
	}
	preps = ownPreparations(&list, &order)
	if len(preps) <= r.Config.PreparationHistory {
		return ctrl.Result{}, nil
	}
	serving, err := r.serving(ctx, r.Client, order.Namespace, order.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	fallback := rollbackCandidate(preps, &order, serving)
	victims := preparation.Collectible(preps, r.Config.PreparationHistory, keeps(&order, serving, fallback))
	if len(victims) == 0 {
		return ctrl.Result{}, nil
	}
	// The cache may lag a promotion, and each collection takes registry calls of up to
	// bundled.Timeout during which a promotion, a rollback or a cluster's report may land: what
	// is kept is decided again on what the API server says right before each deletion.
	var deleted []string
	for _, p := range victims {
		kept, err := r.keptNow(ctx, req.NamespacedName, p, fallback)
		if err != nil {
			r.announce(&order, deleted)
			return ctrl.Result{}, err
		}
		if kept {
			continue
		}
		if err := r.collect(ctx, p); err != nil {
			r.announce(&order, deleted)
			return ctrl.Result{}, err
		}
		deleted = append(deleted, p.Name)
	}
	r.announce(&order, deleted)
	return ctrl.Result{}, nil
}

// gcQuiet is how long after an Order's newest Preparation appeared its history is collected.
const gcQuiet = 10 * time.Second

// newest is when the newest of preps was made.
func newest(preps []*v1.Preparation) time.Time {
	var t time.Time
	for _, p := range preps {
		if p.CreationTimestamp.After(t) {
			t = p.CreationTimestamp.Time
		}
	}
	return t
}

// ownPreparations are the Preparations of list that order controls and that are not being deleted.
func ownPreparations(list *v1.PreparationList, order *v1.Order) []*v1.Preparation {
	var preps []*v1.Preparation
	for i := range list.Items {
		if p := &list.Items[i]; metav1.IsControlledBy(p, order) && p.DeletionTimestamp.IsZero() {
			preps = append(preps, p)
		}
	}
	return preps
}

// serving reads the Serving of an Order; nil when it does not exist.
func (r *Collector) serving(ctx context.Context, reader client.Reader, namespace, name string) (*v1.Serving, error) {
	var s v1.Serving
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Serving %s/%s: %w", namespace, name, err)
	}
	return &s, nil
}

// collect deletes a Preparation's artifact, then the Preparation: a failure in between leaves
// the Preparation, which the next pass collects again (an artifact already gone is no error).
// keptNow reads the Order and its Serving again from the API server and says whether p is kept
// now (the Order's latest, the Serving's, or one it runs), or the Order is gone.
func (r *Collector) keptNow(ctx context.Context, key client.ObjectKey, p *v1.Preparation, fallback string) (bool, error) {
	var order v1.Order
	if err := r.Reader.Get(ctx, key, &order); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil // the Order's deletion takes its Preparations; nothing to collect
		}
		return false, fmt.Errorf("read Order %s again: %w", key, err)
	}
	serving, err := r.serving(ctx, r.Reader, key.Namespace, key.Name)
	if err != nil {
		return false, err
	}
	return keeps(&order, serving, fallback)(p), nil
}

// keeps is preparation.Keeps, and the Preparation named fallback: the one a roll-out of the
// Serving's Preparation would go back to now, which a rollback writes into Applications before
// its status names it (status.rollout.rollbackTo).
func keeps(order *v1.Order, s *v1.Serving, fallback string) func(*v1.Preparation) bool {
	keep := preparation.Keeps(order, s)
	return func(p *v1.Preparation) bool { return keep(p) || (fallback != "" && p.Name == fallback) }
}

// rollbackCandidate names the Preparation a roll-out of the Serving's Preparation would go back
// to now (the newest older one with a record of the Order's Environment), or nothing.
func rollbackCandidate(preps []*v1.Preparation, order *v1.Order, s *v1.Serving) string {
	if s == nil || s.Spec.PreparationName == "" {
		return ""
	}
	all := make([]v1.Preparation, len(preps))
	for i, p := range preps {
		all[i] = *p
	}
	to, err := promotion.RollbackTargetIn(promotion.OrderPreparations(all, order.Name), s.Spec.PreparationName, order.Spec.EnvironmentRef.Name)
	if err != nil {
		return ""
	}
	return to.Name
}

// collect deletes p, then its artifact. The deletion of the object is the commit point: it is
// made only on the resourceVersion the collector decided on, right after keptNow, and once it is
// gone the Preparation can be neither promoted nor rolled back to; its artifact goes after. A
// crash between the two leaves an artifact no Preparation names, never a Preparation without its
// artifact.
func (r *Collector) collect(ctx context.Context, p *v1.Preparation) error {
	uid, rv := p.UID, p.ResourceVersion
	if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // collected already
		}
		return fmt.Errorf("collect Preparation %s/%s: %w", p.Namespace, p.Name, err)
	}
	// Where the artifact is today: Kokumi's own repository follows the bundled registry when it
	// moves. An artifact elsewhere than in today's bundled registry is not Kokumi's to delete.
	repository, digest := preparation.ArtifactLocation(r.Config.BundledRegistry, p)
	if host, _, _ := strings.Cut(repository, "/"); host == r.Config.BundledRegistry {
		if err := r.deleteArtifact(ctx, repository, digest); err != nil {
			return fmt.Errorf("collect Preparation %s/%s: it is deleted, its artifact %s@%s is left: %w", p.Namespace, p.Name, repository, digest, err)
		}
	}
	ctrl.LoggerFrom(ctx).Info("collected an old Preparation and its artifact", "preparation", p.Name, "artifact", p.Spec.Artifact.Ref)
	return nil
}

// deleteArtifact deletes the manifest repository@digest and its deployment records (cosign's
// tag sha256-<hex>.att), the records first.
func (r *Collector) deleteArtifact(ctx context.Context, repository, digest string) error {
	ctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	records, err := record.AttestationTag(digest)
	if err != nil {
		return err
	}
	repo, err := r.Registry.Repository(repository)
	if err != nil {
		return err
	}
	for _, ref := range []string{records, digest} {
		desc, err := repo.Resolve(ctx, ref)
		if oci.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resolve %s: %w", ref, err)
		}
		if err := repo.Manifests().Delete(ctx, desc); err != nil && !oci.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", ref, err)
		}
	}
	return nil
}

// announce records an event on the Order naming the Preparations deleted, if any.
func (r *Collector) announce(order *v1.Order, deleted []string) {
	if len(deleted) == 0 {
		return
	}
	r.Recorder.Eventf(order, nil, corev1.EventTypeNormal, ReasonPreparationsCollected, "Collect",
		"deleted %d old Preparations and their artifacts, keeping the newest %d (--preparation-history): %s",
		len(deleted), r.Config.PreparationHistory, text.ShortenMiddle(strings.Join(deleted, ", "), text.MaxMessage))
}
