// Package order holds the Order reconciler: it renders an Order's Product into Preparations and
// keeps the Order's Serving, promoting Automatic Orders through the gate of their Environment.
package order

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"time"

	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/recipe"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/whoami"
)

const (
	// productRefIndex indexes Orders by spec.productRef.name.
	productRefIndex = "spec.productRef.name"
	// resync is how often a rendered Order looks whether a tag moved.
	resync = 10 * time.Minute
	// renderTimeout bounds one render: pull, images and push.
	renderTimeout = 5 * time.Minute
)

// PromotionGate decides whether an Order in Automatic mode may promote a Preparation to its
// Serving now; when it may not yet, the verdict says why and when to look again. The
// promotion pipeline of the Order's Environment (Pipeline.Gate) plugs in here.
type PromotionGate func(ctx context.Context, order *v1.Order, prep *v1.Preparation) (promotion.Verdict, error)

// Reconciler renders an Order's Product into Preparations and keeps its Serving.
type Reconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server, so that Kokumi caches none of a
	// tenant's; nil reads them through Client.
	APIReader client.Reader
	// Credentials reads the bundled registry's credentials Secret, which every render signs in
	// with (registrycreds.NewCredentialsCache: a watch of that one Secret); nil reads it as
	// APIReader reads Secrets.
	Credentials client.Reader
	// Recorder records events on new Preparations and failure transitions.
	Recorder events.EventRecorder
	// Config is Kokumi's configuration (the bundled registry).
	Config config.Config
	// Gate holds Automatic promotion back; nil promotes at once.
	Gate PromotionGate
	// Name is how the API server names the reconciler's writes: an Automatic promotion writes
	// it into the Serving's spec.promotedBy, as the admission policy kokumi-serving-approval
	// asks. SetupWithManager learns it (whoami.Name) when empty; when the API server does not say,
	// promotions clear promotedBy, which that policy refuses where it is installed.
	Name string
	// RetryAfter is when a failed render is first tried again without any change (default five
	// seconds); each failure in a row doubles the wait, up to MaxRetryAfter.
	RetryAfter time.Duration
	// MaxRetryAfter is the longest wait between two failed renders (default ten minutes).
	MaxRetryAfter time.Duration
	// Resync is how often a rendered Order looks whether its source tag or an image tag moved,
	// which makes a new Preparation (default ten minutes). Nothing is rendered when none did.
	Resync time.Duration
	// TagTTL is how long an image tag's digest is kept for every Order to share (default
	// images.DefaultTagTTL); keep it under Resync, or a resync may not ask the registry.
	TagTTL time.Duration

	retries preparation.Retries
	// renders remembers each Order's last render, for a reconcile that reads the Order before
	// the cache shows the status that render wrote (see recipe.Skip).
	renders preparation.Renders
	// slots bound the renders running at once (renderSlots).
	slots     *slots
	slotsOnce sync.Once
	// tags keep what each image tag pointed to for a few seconds, by credentials, shared by
	// every Order (tagCache).
	tags     *images.TagCache
	tagsOnce sync.Once
	// verifier checks the inputs' signatures when a Product asks (verify.go).
	verifier sourcesig.Verifier
	// keyVersions reads the metadata of the trusted keys' ConfigMaps (keys.go).
	keyVersions client.Reader
}

// Setup registers the Order reconciler, whose Automatic promotions pass gate.
func Setup(mgr ctrl.Manager, cfg config.Config, gate PromotionGate) error {
	creds, err := registrycreds.NewCredentialsCache(mgr, cfg)
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Credentials: creds, Recorder: mgr.GetEventRecorder("kokumi-order"), Config: cfg,
		Gate: gate}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler: Orders, their Preparations and Servings, and the
// Products they name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Name == "" {
		name, err := whoami.Name(context.Background(), mgr.GetConfig())
		if err != nil {
			mgr.GetLogger().WithName("order").Error(err, "Automatic promotions will not name Kokumi in the Servings' spec.promotedBy: the admission policy kokumi-serving-approval, where installed, refuses them")
		}
		r.Name = name
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Order{}, productRefIndex,
		func(o client.Object) []string { return []string{o.(*v1.Order).Spec.ProductRef.Name} }); err != nil {
		return fmt.Errorf("index orders by product: %w", err)
	}
	keyChanges, err := r.watchTrustedKeys(mgr)
	if err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("order").
		For(&v1.Order{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&v1.Serving{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1.Product{}, handler.EnqueueRequestsFromMapFunc(r.ordersOfProduct),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// What runs in a required Environment decides whether the Orders after it may promote.
		Watches(&v1.Serving{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		Watches(&v1.Preparation{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		// A trusted key added, rotated or removed (keys.go).
		WatchesRawSource(keyChanges).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.Workers(config.OrderConcurrency)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up order controller: %w", err)
	}
	return nil
}

func (r *Reconciler) ordersOfProduct(ctx context.Context, o client.Object) []reconcile.Request {
	var orders v1.OrderList
	if err := r.List(ctx, &orders, client.InNamespace(o.GetNamespace()), client.MatchingFields{productRefIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list orders of product", "product", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(orders.Items))
	for _, ord := range orders.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ord)})
	}
	return reqs
}

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders,verbs=get;list;watch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=products,verbs=get;list;watch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=preparations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=preparations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;list;watch

// Reconcile renders the Order's Product; a new result becomes a new Preparation, and the
// Serving follows the promotion mode.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	var order v1.Order
	if err := r.Get(ctx, req.NamespacedName, &order); err != nil {
		r.retries.Forget(req.NamespacedName)
		r.renders.Forget(req.NamespacedName)
		if apierrors.IsNotFound(err) {
			kmetrics.ForgetOrder(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !order.DeletionTimestamp.IsZero() {
		r.retries.Forget(req.NamespacedName)
		r.renders.Forget(req.NamespacedName)
		kmetrics.ForgetOrder(order.Namespace, order.Name)
		return ctrl.Result{}, nil
	}
	base := order.DeepCopy()
	before := &base.Status
	defer func() {
		ready := meta.FindStatusCondition(order.Status.Conditions, v1.ConditionReady)
		kmetrics.SetOrderWaiting(order.Namespace, order.Name, ready != nil && ready.Reason == v1.ReasonAwaitingStage)
		// A merge patch of what this reconcile changed, under the optimistic lock: after a read
		// the cache had not caught up with, it conflicts and the reconcile runs again on what is
		// there (renders remembers the last render, so nothing renders twice). An Order deleted
		// meanwhile has no status left to write.
		written, perr := status.Write(ctx, r.Client, &order, base)
		if perr != nil {
			err = errors.Join(err, perr)
		}
		if written.Conflict && err == nil && (result.RequeueAfter == 0 || result.RequeueAfter > status.ConflictRetry) {
			result = written.Result()
		}
	}()

	product, failure := r.product(ctx, &order)
	if failure != nil {
		// The Product's creation brings the Order back.
		r.retries.Forget(req.NamespacedName)
		order.Status.RenderRetry = nil
		r.setFailed(&order, before, failure, "")
		return ctrl.Result{}, nil
	}
	// A failed input is tried again once its wait is over, or at once when the Order, its
	// Product or the trusted keys it names change; whatever else brings the Order back
	// meanwhile renders nothing.
	input := r.retryInput(ctx, &order, product)
	if rr := order.Status.RenderRetry; rr != nil && rr.Input == input {
		// After a restart only the Order says when its failed input is due.
		r.retries.Restore(req.NamespacedName, input, int(rr.Failures), rr.NotBefore.Time)
	}
	if wait := r.retries.Wait(req.NamespacedName, input, time.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	prep, failure := r.prepare(ctx, &order, product, r.inFlight(ctx, &order, base, input))
	if failure == busy {
		return ctrl.Result{RequeueAfter: busyRetry}, nil
	}
	if failure != nil {
		return r.renderFailed(ctx, &order, before, input, failure), nil
	}
	r.retries.Forget(req.NamespacedName)
	order.Status.RenderRetry = nil
	verdict, err := r.promote(ctx, &order, prep)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !verdict.Allowed {
		awaitStage(&order, before, prep, verdict)
	}
	order.Status.ObservedGeneration = order.Generation
	return ctrl.Result{RequeueAfter: r.resyncAfter(verdict)}, nil
}

// renderFailed records a failed render of input: the Order waits before it renders input again
// (preparation.Retries), its Ready condition and status.renderRetry say why and until when.
func (r *Reconciler) renderFailed(ctx context.Context, order *v1.Order, before *v1.OrderStatus,
	input string, failure *failure) ctrl.Result {
	now := time.Now()
	first, most := preparation.RetryWaits(r.RetryAfter, r.MaxRetryAfter)
	attempts, wait := r.retries.Failed(types.NamespacedName{Namespace: order.Namespace, Name: order.Name}, input, now, first, most)
	var retry string
	order.Status.RenderRetry, retry = preparation.RetryNote(input, attempts, wait, now)
	r.setFailed(order, before, failure, retry)
	ctrl.LoggerFrom(ctx).Info("render failed", "reason", failure.Reason, "message", failure.Message, "attempts", attempts, "retryAfter", wait)
	return ctrl.Result{RequeueAfter: wait}
}

// awaitStage turns the Order's Ready condition into AwaitingStage: the gate holds the promotion
// of prep back, and verdict says why.
func awaitStage(order *v1.Order, before *v1.OrderStatus, prep *v1.Preparation, verdict promotion.Verdict) {
	c := meta.FindStatusCondition(order.Status.Conditions, v1.ConditionReady)
	// The render message ends with the Preparation's unpinned images, if any: the verdict
	// says them already.
	rendered := c.Message
	if problem := stages.ReleaseOf(prep).PinProblem(); problem != "" {
		rendered = strings.TrimSuffix(rendered, "; "+problem)
	}
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonAwaitingStage,
		Message:            shorten(verdict.Message + "; the Serving keeps running what it runs. " + rendered),
		ObservedGeneration: order.Generation,
	})
	if old := meta.FindStatusCondition(before.Conditions, v1.ConditionReady); old != nil && old.Reason == v1.ReasonAwaitingStage {
		meta.FindStatusCondition(order.Status.Conditions, v1.ConditionReady).LastTransitionTime = old.LastTransitionTime
	}
}

// resyncAfter is when a rendered Order looks again: after Resync, or when the gate's soak ends
// if that is sooner.
func (r *Reconciler) resyncAfter(verdict promotion.Verdict) time.Duration {
	after := resync
	if r.Resync > 0 {
		after = r.Resync
	}
	if verdict.RecheckAfter > 0 && verdict.RecheckAfter+time.Second < after {
		// The soak ends by itself: look again then, not before.
		after = verdict.RecheckAfter + time.Second
	}
	return after
}

// busy is the failure of a render that found no slot: its namespace runs its share of the
// renders (slots). It is no failure of the Order's: it is tried again after busyRetry.
var busy = &failure{}

// busyRetry is how soon an Order that found no render slot is tried again.
const busyRetry = time.Second

// renderSlots are the slots of the renders, made at the first render (Config.RenderWorkers).
func (r *Reconciler) renderSlots() *slots {
	r.slotsOnce.Do(func() { r.slots = newSlots(r.Config.RenderWorkers) })
	return r.slots
}

// tagCache is the image tags' cache all Orders share: when a chart version changes under a
// thousand Orders, each tag is resolved about once in the pass, not once per Order, and the
// skip rule's checks of the images (recipe.Skip) that run together share it too. An answer
// serves only Orders whose Product signs in to that registry with the same credential
// (images.TagCache), and a moved tag is seen at most TagTTL late.
func (r *Reconciler) tagCache() *images.TagCache {
	r.tagsOnce.Do(func() { r.tags = images.NewTagCache(r.TagTTL) })
	return r.tags
}

// failure is a failed render: the Order's Ready reason and message.
type failure = preparation.Failure

// product reads the Order's Product, or says why it cannot.
func (r *Reconciler) product(ctx context.Context, order *v1.Order) (*v1.Product, *failure) {
	var product v1.Product
	if err := r.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: order.Spec.ProductRef.Name}, &product); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &failure{Reason: v1.ReasonProductNotFound, Message: fmt.Sprintf(
				"Product %q does not exist in namespace %s: create it or fix spec.productRef.name", order.Spec.ProductRef.Name, order.Namespace)}
		}
		return nil, &failure{Reason: v1.ReasonProductNotFound, Message: fmt.Sprintf("get product %q: %v", order.Spec.ProductRef.Name, err)}
	}
	return &product, nil
}

// prepare renders the Order and returns its Preparation, new or existing, and records it in
// the status; or returns why it failed. When nothing the render reads changed since the latest
// Preparation, it renders nothing and returns that one; else it calls inFlight before it renders.
func (r *Reconciler) prepare(ctx context.Context, order *v1.Order, product *v1.Product, inFlight func() error) (_ *v1.Preparation, failed *failure) {
	// Skipped until a render runs (nothing the render reads changed); Failure whatever failed.
	start, result := time.Now(), kmetrics.Skipped
	defer func() {
		if failed != nil {
			result = kmetrics.Failure
		}
		kmetrics.ObserveRender(result, time.Since(start))
	}()
	// An Order of a namespace that runs its share of the renders is tried again a moment later
	// before anything is asked of a registry or the API server: when all of a namespace's Orders
	// change at once, the skip rule's requests are not made again at every try.
	if r.renderSlots().full(order.Namespace) {
		return nil, busy
	}
	creds, f := r.credentials(ctx, product)
	if f != nil {
		return nil, f
	}
	in, f := recipe.Input(order, product, r.Config.BundledRegistry)
	if f != nil {
		return nil, f
	}
	b, f := r.builder(ctx, creds, order.Namespace)
	if f != nil {
		return nil, f
	}
	ctx, cancel := context.WithTimeout(ctx, renderTimeout)
	defer cancel()
	last, remembered := r.renders.Get(types.NamespacedName{Namespace: order.Namespace, Name: order.Name}, order.UID)
	skip := recipe.Skip{Builder: b, BundledRegistry: r.Config.BundledRegistry, Preparations: preparationReader{r.Client}}
	current, currentInputs, f := skip.Unchanged(ctx, order, product, in, preparation.Candidates(order, last, remembered))
	if f != nil {
		return nil, f
	}
	if current != nil {
		return r.unchanged(ctx, b.Sources, order, product, in.Render.TargetNamespace, current, currentInputs)
	}
	// Verified sources (verify.go): the source is checked once its digest is known, before it
	// renders; the images the render pinned after it. Nothing unsigned becomes a Preparation.
	checkImages, f := r.checkSourceFirst(ctx, b, product, in.SourceURL)
	if f != nil {
		return nil, f
	}
	// A slot of the renders: none while the namespace runs its share already (tried again a
	// moment later, without holding this worker).
	release, ok, err := r.renderSlots().take(ctx, order.Namespace)
	if err != nil || !ok {
		return nil, busy
	}
	defer release()
	if err := inFlight(); err != nil {
		return nil, busy // the Order changed meanwhile, or the API server failed: tried again a moment later
	}
	result = kmetrics.Success
	built, err := b.Build(ctx, in)
	// The slot bounds the pull, the render and the images' resolution; the push and the
	// writes to the API server that follow wait on the network, not on this machine, and the
	// next render need not wait for them.
	release()
	if err != nil {
		return nil, recipe.BuildFailure(err)
	}
	verified, f := checkImages(ctx, built.Images)
	if f != nil {
		return nil, f
	}
	order.Status.TargetNamespace = in.Render.TargetNamespace
	inputs := recipe.InputsHash(in, built.SourceDigest, product)

	existing, latest, err := r.preparations(ctx, order, built.ConfigHash)
	if err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	if existing != nil {
		if f := r.keepArtifact(ctx, b, order, existing, in, built); f != nil {
			return nil, f
		}
		if err := r.markReady(ctx, existing); err != nil {
			return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
		}
		r.setRendered(order, existing, false, inputs)
		return existing, nil
	}
	parent := ""
	if latest != nil {
		parent = latest.Spec.Artifact.Digest
	}
	repository := r.artifactRepository(order)
	artifactDigest, err := b.Push(ctx, repository, in, built, parent)
	if err != nil {
		return nil, recipe.BuildFailure(err)
	}
	// Provenance (provenance.go): signed and attached before the Preparation is made.
	prov, f := r.attachProvenance(ctx, b, order, product, in, built, repository, artifactDigest, parent, verified, start)
	if f != nil {
		return nil, f
	}
	prep := recipe.New(order, product, in, built, recipe.Pushed{Repository: repository, Digest: artifactDigest, Parent: parent}, r.Config.BundledRegistry)
	prep.Spec.Provenance = prov
	if err := controllerutil.SetControllerReference(order, prep, r.Scheme()); err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: fmt.Sprintf("own preparation: %v", err)}
	}
	if err := r.Create(ctx, prep); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: fmt.Sprintf("create Preparation %s: %v", prep.Name, err)}
	}
	if err := r.markReady(ctx, prep); err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	r.setRendered(order, prep, true, inputs)
	r.Recorder.Eventf(order, prep, corev1.EventTypeNormal, v1.ReasonRendered, "Render",
		"Rendered Preparation %s (%s@%s, %d images) into %s", prep.Name, in.SourceURL, built.SourceDigest, len(built.Images), prep.Spec.Artifact.Ref)
	return prep, nil
}

// unchanged answers a render whose inputs did not change since current was made (with the
// inputs hash currentInputs): their signatures are checked again (verify.go), from the cache
// unless a signature or the trusted keys changed, and current is marked Ready and recorded.
func (r *Reconciler) unchanged(ctx context.Context, sources *oci.Client, order *v1.Order, product *v1.Product, targetNamespace string, current *v1.Preparation, currentInputs string) (*v1.Preparation, *failure) {
	if _, f := r.verifySources(ctx, sources, product, current.Spec.Source.URL, current.Spec.Source.Digest, pinsOf(current)); f != nil {
		return nil, f
	}
	// A crash between creating a Preparation and marking it Ready leaves it not Ready, and
	// Automatic promotion would wait for it forever: mark it now.
	if err := r.markReady(ctx, current); err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	order.Status.TargetNamespace = targetNamespace
	r.setRendered(order, current, false, currentInputs)
	return current, nil
}

// keepArtifact pushes the artifact of existing again when the bundled registry does not hold it
// (a restore that lost its data). built has existing's config hash, and a push is
// reproducible: with existing's source version and parent it gives existing's digest.
func (r *Reconciler) keepArtifact(ctx context.Context, b *build.Builder, order *v1.Order,
	existing *v1.Preparation, in build.Input, built *build.Built) *failure {
	present, err := recipe.ArtifactPresent(ctx, b.Sources, r.Config.BundledRegistry, existing)
	if err != nil {
		return &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	if present {
		return nil
	}
	repository, digest := preparation.ArtifactLocation(r.Config.BundledRegistry, existing)
	again := in
	again.SourceURL, again.Version = existing.Spec.Source.URL, existing.Spec.Source.Version
	pushed, err := b.Push(ctx, repository, again, built, existing.Spec.ParentDigest)
	if err != nil {
		return recipe.BuildFailure(err)
	}
	if pushed != digest {
		return &failure{Reason: v1.ReasonPushFailed, Message: fmt.Sprintf(
			"the bundled registry lost the artifact of Preparation %s, and its render pushed again is %s, not %s (another version of Kokumi wrote it): change the Order or its Product to make a new Preparation, and promote it",
			existing.Name, pushed, digest)}
	}
	r.Recorder.Eventf(order, existing, corev1.EventTypeNormal, "Repushed", "Render",
		"The bundled registry did not hold the artifact of Preparation %s: pushed its render again to %s@%s", existing.Name, repository, digest)
	return nil
}

// credentials reads the Product's registry credentials Secret, if it names one.
func (r *Reconciler) credentials(ctx context.Context, product *v1.Product) (oci.Credentials, *failure) {
	ref := product.Spec.Source.CredentialsRef
	if ref == nil {
		return nil, nil
	}
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	var secret corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: product.Namespace, Name: ref.Name}, &secret); err != nil {
		return nil, &failure{Reason: v1.ReasonSourceNotFound, Message: fmt.Sprintf(
			"credentials Secret %q of Product %s: %v: create it or fix spec.source.credentialsRef", ref.Name, product.Name, err)}
	}
	data, ok := secret.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return nil, &failure{Reason: v1.ReasonSourceNotFound, Message: fmt.Sprintf(
			"credentials Secret %q has no %s: make it a kubernetes.io/dockerconfigjson Secret", ref.Name, corev1.DockerConfigJsonKey)}
	}
	creds, err := oci.ParseDockerConfig(data)
	if err != nil {
		return nil, &failure{Reason: v1.ReasonSourceNotFound, Message: fmt.Sprintf(
			"credentials Secret %q: %v: fix its %s (`kubectl create secret docker-registry` writes a valid one), or spec.source.credentialsRef of Product %s",
			ref.Name, err, corev1.DockerConfigJsonKey, product.Name)}
	}
	return creds, nil
}

// builder pulls and pushes for an Order of namespace: with the Product's credentials, and as
// the pusher in the bundled registry, where it reaches only namespace's own Preparations and
// vendored images (vendored under vendor/<namespace>/).
func (r *Reconciler) builder(ctx context.Context, creds oci.Credentials, namespace string) (*build.Builder, *failure) {
	creds, err := r.withPusher(ctx, creds, namespace)
	if err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	plain := []string{r.Config.BundledRegistry}
	own := r.ownRepositories(namespace)
	return &build.Builder{
		Sources: &oci.Client{Credentials: creds, PlainHTTP: plain, Allow: own},
		Images:  &images.Resolver{Credentials: creds, PlainHTTP: plain, Namespace: namespace, Allow: own, Tags: r.tagCache()},
		Budgets: r.Config.RenderBudgets,
		Allowed: r.Config.RegistryAllowed,
		Render:  r.renderer(namespace).Render,
	}, nil
}

// renderer renders namespace's renders in a process of its own (RenderProcess).
func (r *Reconciler) renderer(namespace string) isolate.Process {
	return RenderProcess(r.Config, namespace)
}

// RenderProcess is the render process of namespace's renders under configuration c: the render
// budgets' memory and timeout, and a child started ahead for each render slot so that no render
// waits for its start. A child kept after a render renders the next of any namespace unless the
// admin keeps them per namespace (Config.RenderChildPerNamespace, isolate.Process.Namespace):
// that costs a child's start for almost every render when Orders spread over namespaces, and
// made a chart change of 100 Orders over 100 namespaces 1.61× the recording bare pipeline
// against 0.88× (make bench-render's check), too near its bound of 2× to be the default
// (docs/orders-and-preparations.md).
func RenderProcess(c config.Config, namespace string) isolate.Process {
	b := c.RenderBudgets.WithDefaults()
	workers := c.RenderWorkers
	config.OrDefault(&workers, config.DefaultRenderWorkers)
	p := isolate.Process{Memory: b.Memory, Timeout: b.Timeout, Warm: workers}
	if c.RenderChildPerNamespace {
		p.Namespace = namespace
	}
	return p
}

// artifactRepository is where an Order's Preparations are pushed: the bundled registry,
// repository kokumi/<namespace>/<order>.
func (r *Reconciler) artifactRepository(order *v1.Order) string {
	return r.Config.BundledRegistry + "/" + preparation.OwnArtifactPath(order.Namespace, order.Name)
}

// preparations finds the Order's Preparation with configHash, if any, and its newest one.
func (r *Reconciler) preparations(ctx context.Context, order *v1.Order, configHash string) (existing, latest *v1.Preparation, err error) {
	var list v1.PreparationList
	if err := r.List(ctx, &list, client.InNamespace(order.Namespace), client.MatchingLabels{preparation.LabelOrder: order.Name}); err != nil {
		return nil, nil, fmt.Errorf("list preparations of order %s: %w", order.Name, err)
	}
	existing, latest = preparation.Find(list.Items, order, configHash)
	return existing, latest, nil
}

// markReady sets the new Preparation's Ready condition.
func (r *Reconciler) markReady(ctx context.Context, prep *v1.Preparation) error {
	if meta.IsStatusConditionTrue(prep.Status.Conditions, v1.ConditionReady) {
		return nil
	}
	if prep.ResourceVersion == "" {
		if err := r.Get(ctx, client.ObjectKeyFromObject(prep), prep); err != nil {
			return fmt.Errorf("get preparation %s: %w", prep.Name, err)
		}
	}
	base := prep.DeepCopy()
	meta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{
		Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered,
		Message: "Rendered and pushed to " + prep.Spec.Artifact.Ref, ObservedGeneration: prep.Generation,
	})
	// Its Ready condition only: the deployment records in the same status are the Serving's.
	written, err := status.Write(ctx, r.Client, prep, base)
	if err != nil {
		return fmt.Errorf("mark preparation %s ready: %w", prep.Name, err)
	}
	if written.Conflict {
		return fmt.Errorf("mark preparation %s ready: it changed meanwhile; trying again", prep.Name)
	}
	return nil
}

// setRendered records prep, rendered from inputs (see recipe.InputsHash), as the Order's latest.
func (r *Reconciler) setRendered(order *v1.Order, prep *v1.Preparation, created bool, inputs string) {
	r.renders.Set(types.NamespacedName{Namespace: order.Namespace, Name: order.Name}, order.UID, preparation.Render{Inputs: inputs, Preparation: prep.Name})
	order.Status.LatestPreparation = prep.Name
	order.Status.InputsHash = inputs
	msg := fmt.Sprintf("Preparation %s: %s@%s, %d images, artifact %s", prep.Name, prep.Spec.Source.URL,
		prep.Spec.Source.Digest, len(prep.Spec.Images), prep.Spec.Artifact.Digest)
	if !created {
		msg = "Up to date: " + msg
	}
	if problem := stages.ReleaseOf(prep).PinProblem(); problem != "" {
		msg += "; " + problem
	}
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered,
		Message: shorten(msg), ObservedGeneration: order.Generation,
	})
}

// setFailed sets Ready=False, its message f's followed by retry (when it is tried again), and
// records a Warning event when the reason or f's message changed.
func (r *Reconciler) setFailed(order *v1.Order, before *v1.OrderStatus, f *failure, retry string) {
	what := shorten(f.Message)
	msg := what
	if retry != "" {
		what = text.ShortenMiddle(f.Message, text.MaxMessage-len(retrySeparator)-len(retry))
		msg = what + retrySeparator + retry
	}
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: f.Reason,
		Message: msg, ObservedGeneration: order.Generation,
	})
	old := meta.FindStatusCondition(before.Conditions, v1.ConditionReady)
	if old == nil || old.Reason != f.Reason || (old.Message != what && !strings.HasPrefix(old.Message, what+retrySeparator)) {
		r.Recorder.Eventf(order, nil, corev1.EventTypeWarning, f.Reason, "Render", "%s", what)
	}
}

// retrySeparator separates a failure from when it is tried again in the Ready message.
const retrySeparator = " — "

func shorten(s string) string { return text.ShortenMiddle(s, text.MaxMessage) }

// promote keeps the Serving (same name as the Order). Automatic mode points it at the Order's
// newest Ready Preparation once the gate allows, naming Kokumi in spec.promotedBy, and
// otherwise returns why it waits; Manual mode creates it empty and leaves
// spec.preparationName to a person.
func (r *Reconciler) promote(ctx context.Context, order *v1.Order, prep *v1.Preparation) (verdict promotion.Verdict, err error) {
	verdict.Allowed = true
	var serving v1.Serving
	err = r.Get(ctx, client.ObjectKeyFromObject(order), &serving)
	if err != nil && !apierrors.IsNotFound(err) {
		return verdict, fmt.Errorf("get serving %s: %w", order.Name, err)
	}
	exists := err == nil
	want := ""
	if order.Spec.Promotion.Mode == v1.PromotionAutomatic && meta.IsStatusConditionTrue(prep.Status.Conditions, v1.ConditionReady) &&
		(!exists || serving.Spec.PreparationName != prep.Name) {
		if r.Gate != nil {
			if verdict, err = r.Gate(ctx, order, prep); err != nil {
				return verdict, fmt.Errorf("promotion gate of order %s: %w", order.Name, err)
			}
		}
		if verdict.Allowed {
			want = prep.Name
		}
	}
	if !exists {
		serving = v1.Serving{
			ObjectMeta: metav1.ObjectMeta{Name: order.Name, Namespace: order.Namespace, Labels: shard.Inherit(order, nil)},
			Spec:       v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: order.Name}, PreparationName: want},
		}
		if want != "" {
			serving.Spec.PromotedBy = r.Name
		}
		if err := controllerutil.SetControllerReference(order, &serving, r.Scheme()); err != nil {
			return verdict, fmt.Errorf("own serving %s: %w", order.Name, err)
		}
		if err := r.Create(ctx, &serving); err != nil {
			return verdict, fmt.Errorf("create serving %s: %w", order.Name, err)
		}
		return verdict, nil
	}
	if want == "" || serving.Spec.PreparationName == want {
		return verdict, nil
	}
	serving.Spec.PreparationName, serving.Spec.PromotedBy = want, r.Name
	if err := r.Update(ctx, &serving); err != nil {
		return verdict, fmt.Errorf("promote %s to serving %s: %w", want, order.Name, err)
	}
	return verdict, nil
}

// preparationReader reads Preparations for the skip rule (recipe.Preparations).
type preparationReader struct{ client.Reader }

// Preparation reads the Preparation namespace/name.
func (p preparationReader) Preparation(ctx context.Context, namespace, name string) (*v1.Preparation, error) {
	var prep v1.Preparation
	if err := p.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &prep); err != nil {
		return nil, fmt.Errorf("get preparation %s/%s: %w", namespace, name, err)
	}
	return &prep, nil
}
