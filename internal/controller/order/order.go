// Package order holds the Order reconciler: it renders an Order's Product into Preparations and
// keeps the Order's Serving, promoting Automatic Orders through the gate of their Environment.
package order

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

	deliveryv1alpha1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/whoami"
)

const (
	// productRefIndex indexes Orders by spec.productRef.name.
	productRefIndex = "spec.productRef.name"
	// retryAfter is when a failed render is first tried again without any change.
	retryAfter = 5 * time.Second
	// maxRetryAfter is the longest wait between two failed renders of the same input.
	maxRetryAfter = 10 * time.Minute
	// resync is how often a rendered Order looks whether a tag moved.
	resync = 10 * time.Minute
	// renderTimeout bounds one render: pull, images and push.
	renderTimeout = 5 * time.Minute
)

// PromotionGate decides whether an Order in Automatic mode may promote a Preparation to its
// Serving now; when it may not yet, the verdict says why and when to look again. The
// promotion pipeline of the Order's Environment (Pipeline.Gate) plugs in here.
type PromotionGate func(ctx context.Context, order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation) (promotion.Verdict, error)

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

	retries retries
	// renders remembers each Order's last render, for a reconcile that reads the Order before
	// the cache shows the status that render wrote (see unchanged).
	renders lastRenders
	// slots bound the renders running at once (renderSlots).
	slots     *slots
	slotsOnce sync.Once
	// tags keep what each image tag pointed to for a few seconds, by credentials, shared by
	// every Order (tagCache).
	tags     *images.TagCache
	tagsOnce sync.Once
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
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &deliveryv1alpha1.Order{}, productRefIndex,
		func(o client.Object) []string { return []string{o.(*deliveryv1alpha1.Order).Spec.ProductRef.Name} }); err != nil {
		return fmt.Errorf("index orders by product: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("order").
		For(&deliveryv1alpha1.Order{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&deliveryv1alpha1.Serving{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&deliveryv1alpha1.Product{}, handler.EnqueueRequestsFromMapFunc(r.ordersOfProduct),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// What runs in a required Environment decides whether the Orders after it may promote.
		Watches(&deliveryv1alpha1.Serving{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		Watches(&deliveryv1alpha1.Preparation{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.Workers(config.OrderConcurrency)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up order controller: %w", err)
	}
	return nil
}

func (r *Reconciler) ordersOfProduct(ctx context.Context, o client.Object) []reconcile.Request {
	var orders deliveryv1alpha1.OrderList
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
	log := ctrl.LoggerFrom(ctx)
	var order deliveryv1alpha1.Order
	if err := r.Get(ctx, req.NamespacedName, &order); err != nil {
		r.retries.forget(req.NamespacedName)
		r.renders.forget(req.NamespacedName)
		if apierrors.IsNotFound(err) {
			kmetrics.ForgetOrder(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !order.DeletionTimestamp.IsZero() {
		r.retries.forget(req.NamespacedName)
		r.renders.forget(req.NamespacedName)
		kmetrics.ForgetOrder(order.Namespace, order.Name)
		return ctrl.Result{}, nil
	}
	base := order.DeepCopy()
	before := &base.Status
	defer func() {
		ready := meta.FindStatusCondition(order.Status.Conditions, deliveryv1alpha1.ConditionReady)
		kmetrics.SetOrderWaiting(order.Namespace, order.Name, ready != nil && ready.Reason == deliveryv1alpha1.ReasonAwaitingStage)
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
		r.retries.forget(req.NamespacedName)
		order.Status.RenderRetry = nil
		r.setFailed(&order, before, failure, "")
		return ctrl.Result{}, nil
	}
	// A failed input is tried again once its wait is over, or at once when the Order or its
	// Product changes; whatever else brings the Order back meanwhile renders nothing.
	input := fmt.Sprintf("%d/%s/%d", order.Generation, product.UID, product.Generation)
	if rr := order.Status.RenderRetry; rr != nil && rr.Input == input {
		// After a restart only the Order says when its failed input is due.
		r.retries.restore(req.NamespacedName, input, int(rr.Failures), rr.NotBefore.Time)
	}
	if wait := r.retries.wait(req.NamespacedName, input, time.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	prep, failure := r.prepare(ctx, &order, product, r.inFlight(ctx, &order, base, input))
	if failure == busy {
		return ctrl.Result{RequeueAfter: busyRetry}, nil
	}
	if failure != nil {
		now := time.Now()
		attempts, wait := r.retries.failed(req.NamespacedName, input, now, r.firstRetry(), r.maxRetry())
		order.Status.RenderRetry = &deliveryv1alpha1.RenderRetry{Input: input, Failures: int32(min(attempts, math.MaxInt32)),
			NotBefore: metav1.NewTime(now.Add(wait).Truncate(time.Second).Add(time.Second))}
		times := "once"
		if attempts > 1 {
			times = fmt.Sprintf("%d times in a row", attempts)
		}
		r.setFailed(&order, before, failure, fmt.Sprintf("Failed %s: Kokumi tries again in %s, at %s, or at once when the Order or its Product changes.",
			times, wait, now.Add(wait).UTC().Format(time.RFC3339)))
		log.Info("render failed", "reason", failure.Reason, "message", failure.Message, "attempts", attempts, "retryAfter", wait)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.retries.forget(req.NamespacedName)
	order.Status.RenderRetry = nil
	verdict, err := r.promote(ctx, &order, prep)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !verdict.Allowed {
		c := meta.FindStatusCondition(order.Status.Conditions, deliveryv1alpha1.ConditionReady)
		// The render message ends with the Preparation's unpinned images, if any: the verdict
		// says them already.
		rendered := c.Message
		if problem := stages.ReleaseOf(prep).PinProblem(); problem != "" {
			rendered = strings.TrimSuffix(rendered, "; "+problem)
		}
		meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
			Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: deliveryv1alpha1.ReasonAwaitingStage,
			Message:            shorten(verdict.Message + "; the Serving keeps running what it runs. " + rendered),
			ObservedGeneration: order.Generation,
		})
		if old := meta.FindStatusCondition(before.Conditions, deliveryv1alpha1.ConditionReady); old != nil && old.Reason == deliveryv1alpha1.ReasonAwaitingStage {
			meta.FindStatusCondition(order.Status.Conditions, deliveryv1alpha1.ConditionReady).LastTransitionTime = old.LastTransitionTime
		}
	}
	order.Status.ObservedGeneration = order.Generation
	after := resync
	if r.Resync > 0 {
		after = r.Resync
	}
	if verdict.RecheckAfter > 0 && verdict.RecheckAfter+time.Second < after {
		// The soak ends by itself: look again then, not before.
		after = verdict.RecheckAfter + time.Second
	}
	return ctrl.Result{RequeueAfter: after}, nil
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
// skip rule's checks of the images (stillCurrent) that run together share it too. An answer
// serves only Orders whose Product signs in to that registry with the same credential
// (images.TagCache), and a moved tag is seen at most TagTTL late.
func (r *Reconciler) tagCache() *images.TagCache {
	r.tagsOnce.Do(func() { r.tags = images.NewTagCache(r.TagTTL) })
	return r.tags
}

// failure is a failed render: the Order's Ready reason and message.
type failure struct {
	Reason  string
	Message string
}

// product reads the Order's Product, or says why it cannot.
func (r *Reconciler) product(ctx context.Context, order *deliveryv1alpha1.Order) (*deliveryv1alpha1.Product, *failure) {
	var product deliveryv1alpha1.Product
	if err := r.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: order.Spec.ProductRef.Name}, &product); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &failure{deliveryv1alpha1.ReasonProductNotFound, fmt.Sprintf(
				"Product %q does not exist in namespace %s: create it or fix spec.productRef.name", order.Spec.ProductRef.Name, order.Namespace)}
		}
		return nil, &failure{deliveryv1alpha1.ReasonProductNotFound, fmt.Sprintf("get product %q: %v", order.Spec.ProductRef.Name, err)}
	}
	return &product, nil
}

// prepare renders the Order and returns its Preparation, new or existing, and records it in
// the status; or returns why it failed. When nothing the render reads changed since the latest
// Preparation, it renders nothing and returns that one; else it calls inFlight before it renders.
func (r *Reconciler) prepare(ctx context.Context, order *deliveryv1alpha1.Order, product *deliveryv1alpha1.Product, inFlight func() error) (_ *deliveryv1alpha1.Preparation, failed *failure) {
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
	in, f := r.input(order, product)
	if f != nil {
		return nil, f
	}
	b, f := r.builder(ctx, creds, order.Namespace)
	if f != nil {
		return nil, f
	}
	ctx, cancel := context.WithTimeout(ctx, renderTimeout)
	defer cancel()
	current, currentInputs, f := r.unchanged(ctx, b, order, product, in)
	if f != nil {
		return nil, f
	}
	if current != nil {
		// A crash between creating a Preparation and marking it Ready leaves it not Ready, and
		// Automatic promotion would wait for it forever: mark it now.
		if err := r.markReady(ctx, current); err != nil {
			return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
		}
		order.Status.TargetNamespace = in.Render.TargetNamespace
		r.setRendered(order, current, false, currentInputs)
		return current, nil
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
		return nil, buildFailure(err)
	}
	order.Status.TargetNamespace = in.Render.TargetNamespace
	inputs := inputsHash(in, built.SourceDigest, product)

	existing, latest, err := r.preparations(ctx, order, built.ConfigHash)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	if existing != nil {
		if f := r.keepArtifact(ctx, b, order, existing, in, built); f != nil {
			return nil, f
		}
		if err := r.markReady(ctx, existing); err != nil {
			return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
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
		return nil, buildFailure(err)
	}
	prep := newPreparation(order, product, in, built, repository, artifactDigest, parent, r.bundled(in.VendorRegistry))
	if err := controllerutil.SetControllerReference(order, prep, r.Scheme()); err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, fmt.Sprintf("own preparation: %v", err)}
	}
	if err := r.Create(ctx, prep); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, fmt.Sprintf("create Preparation %s: %v", prep.Name, err)}
	}
	if err := r.markReady(ctx, prep); err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	r.setRendered(order, prep, true, inputs)
	r.Recorder.Eventf(order, prep, corev1.EventTypeNormal, deliveryv1alpha1.ReasonRendered, "Render",
		"Rendered Preparation %s (%s@%s, %d images) into %s", prep.Name, in.SourceURL, built.SourceDigest, len(built.Images), prep.Spec.Artifact.Ref)
	return prep, nil
}

// unchanged returns the Order's latest Preparation when a render would make it again, found
// without rendering: what the render reads hashes to the inputs hash of a render that made it
// (the source version resolving to the same digest: one HEAD request), every image tag of the
// Preparation still points to the digest it pinned (one HEAD request each), and the bundled
// registry holds its artifact. The claims "inputs H rendered into Preparation P" it checks are
// the Order's status and this reconciler's memory of the Order's last render (a cache may not
// show that render's status yet); each is only a candidate, verified against the inputs now, so
// neither can skip a render that is needed. It returns nil when nothing holds or a registry does
// not answer: the render that follows makes what is needed, or says what failed. It fails only
// when the bundled registry cannot tell whether it holds the artifact, which no render would
// change. The second result is the inputs hash that matched.
func (r *Reconciler) unchanged(ctx context.Context, b *build.Builder, order *deliveryv1alpha1.Order,
	product *deliveryv1alpha1.Product, in build.Input) (*deliveryv1alpha1.Preparation, string, *failure) {
	candidates := make([]lastRender, 0, 2)
	if order.Status.InputsHash != "" && order.Status.LatestPreparation != "" {
		candidates = append(candidates, lastRender{inputs: order.Status.InputsHash, preparation: order.Status.LatestPreparation})
	}
	if last, ok := r.renders.get(types.NamespacedName{Namespace: order.Namespace, Name: order.Name}, order.UID); ok && (len(candidates) == 0 || last != candidates[0]) {
		candidates = append(candidates, last)
	}
	if len(candidates) == 0 {
		return nil, "", nil
	}
	sourceDigest, err := resolveSource(ctx, b.Sources, in)
	if err != nil {
		return nil, "", nil
	}
	inputs := inputsHash(in, sourceDigest, product)
	for _, c := range candidates {
		if c.inputs != inputs {
			continue
		}
		latest, f := r.stillCurrent(ctx, b, order, c.preparation)
		if f != nil || latest != nil {
			return latest, inputs, f
		}
	}
	return nil, "", nil
}

// stillCurrent returns the Order's Preparation of that name when its images' tags still point to the
// digests it pinned and the bundled registry holds its artifact; nil when not (see unchanged).
func (r *Reconciler) stillCurrent(ctx context.Context, b *build.Builder, order *deliveryv1alpha1.Order, name string) (*deliveryv1alpha1.Preparation, *failure) {
	var latest deliveryv1alpha1.Preparation
	if err := r.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: name}, &latest); err != nil || !metav1.IsControlledBy(&latest, order) {
		return nil, nil
	}
	originals := make([]string, len(latest.Spec.Images))
	for i, img := range latest.Spec.Images {
		originals[i] = img.Original
	}
	pins, err := b.Images.Resolve(ctx, originals, "")
	if err != nil {
		return nil, nil
	}
	for i, p := range pins {
		if refDigest(p.Pinned) != refDigest(latest.Spec.Images[i].Pinned) {
			return nil, nil
		}
	}
	present, err := r.artifactPresent(ctx, b.Sources, &latest)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	if !present {
		return nil, nil
	}
	return &latest, nil
}

// resolveSource resolves the input's source version (a tag or a digest; empty is latest) to
// the digest a pull would get, with one HEAD request.
func resolveSource(ctx context.Context, sources *oci.Client, in build.Input) (string, error) {
	repo, err := sources.Repository(oci.TrimScheme(in.SourceURL))
	if err != nil {
		return "", err
	}
	version := in.Version
	if version == "" {
		version = "latest"
	}
	desc, err := repo.Resolve(ctx, version)
	if err != nil {
		return "", fmt.Errorf("resolve version %s of %s: %w", version, in.SourceURL, err)
	}
	return desc.Digest.String(), nil
}

// inputsHash identifies what a render reads besides the images' tags: the input (source url
// and version, release name, target namespace, values, CRDs, vendor registry), the digest the
// source resolved to, and the Product's credentials Secret. Values hash as JSON, keys sorted.
// An input that does not hash gives "", which never matches.
func inputsHash(in build.Input, sourceDigest string, product *deliveryv1alpha1.Product) string {
	credentials := ""
	if ref := product.Spec.Source.CredentialsRef; ref != nil {
		credentials = ref.Name
	}
	b, err := json.Marshal(struct {
		Input        build.Input
		SourceDigest string
		Credentials  string
	}{in, sourceDigest, credentials})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// refDigest is the digest of an image reference by digest (after its @).
func refDigest(ref string) string {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	return ""
}

// artifactPresent says whether the current bundled registry holds prep's artifact, at the
// address ArtifactLocation gives.
func (r *Reconciler) artifactPresent(ctx context.Context, sources *oci.Client, prep *deliveryv1alpha1.Preparation) (bool, error) {
	repository, digest := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
	repo, err := sources.Repository(repository)
	if err != nil {
		return false, fmt.Errorf("the artifact of Preparation %s: %w", prep.Name, err)
	}
	if _, err := repo.Resolve(ctx, digest); err != nil {
		if oci.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cannot tell whether the bundled registry holds the artifact %s@%s of Preparation %s (%w): check that the registry is running", repository, digest, prep.Name, err)
	}
	return true, nil
}

// keepArtifact pushes the artifact of existing again when the bundled registry does not hold it
// (a restore that lost its data). built has existing's config hash, and a push is
// reproducible: with existing's source version and parent it gives existing's digest.
func (r *Reconciler) keepArtifact(ctx context.Context, b *build.Builder, order *deliveryv1alpha1.Order,
	existing *deliveryv1alpha1.Preparation, in build.Input, built *build.Built) *failure {
	present, err := r.artifactPresent(ctx, b.Sources, existing)
	if err != nil {
		return &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	if present {
		return nil
	}
	repository, digest := preparation.ArtifactLocation(r.Config.BundledRegistry, existing)
	again := in
	again.SourceURL, again.Version = existing.Spec.Source.URL, existing.Spec.Source.Version
	pushed, err := b.Push(ctx, repository, again, built, existing.Spec.ParentDigest)
	if err != nil {
		return buildFailure(err)
	}
	if pushed != digest {
		return &failure{deliveryv1alpha1.ReasonPushFailed, fmt.Sprintf(
			"the bundled registry lost the artifact of Preparation %s, and its render pushed again is %s, not %s (another version of Kokumi wrote it): change the Order or its Product to make a new Preparation, and promote it",
			existing.Name, pushed, digest)}
	}
	r.Recorder.Eventf(order, existing, corev1.EventTypeNormal, "Repushed", "Render",
		"The bundled registry did not hold the artifact of Preparation %s: pushed its render again to %s@%s", existing.Name, repository, digest)
	return nil
}

// retries holds, per Order, the failures in a row of one input (the Order's and its Product's
// generations): a failed render waits before it is tried again, twice as long after each
// failure. The Order's status.renderRetry keeps it too, which a controller that starts again
// reads back (restore).
type retries struct {
	mu     sync.Mutex
	orders map[types.NamespacedName]retry
}

// retry is an Order's failures in a row of input, and when it may be tried again.
type retry struct {
	input    string
	failures int
	next     time.Time
}

// wait is how long an Order's failed input still waits at now; 0 when it may render.
func (t *retries) wait(order types.NamespacedName, input string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.orders[order]
	if !ok || last.input != input || !now.Before(last.next) {
		return 0
	}
	return last.next.Sub(now)
}

// failed records a failure of the Order's input at now and returns how many in a row, and
// how long the next try waits: first after one failure, doubling with each, at most most.
func (t *retries) failed(order types.NamespacedName, input string, now time.Time, first, most time.Duration) (int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]retry{}
	}
	last := t.orders[order]
	if last.input != input {
		last = retry{input: input}
	}
	last.failures++
	wait := backoff(last.failures, first, most)
	last.next = now.Add(wait)
	t.orders[order] = last
	return last.failures, wait
}

// restore takes an Order's failures of input from its status, when none of this input are
// known here (the controller started again since).
func (t *retries) restore(order types.NamespacedName, input string, failures int, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]retry{}
	}
	if last, ok := t.orders[order]; !ok || last.input != input {
		t.orders[order] = retry{input: input, failures: failures, next: next}
	}
}

// forget drops an Order's failures: it rendered, or is gone.
func (t *retries) forget(order types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.orders, order)
}

// lastRenders remembers, per Order, the inputs hash and the Preparation of its last render.
type lastRenders struct {
	mu     sync.Mutex
	orders map[types.NamespacedName]rememberedRender
}

// lastRender is a claim that a render of inputs made preparation.
type lastRender struct {
	inputs, preparation string
}

// rememberedRender is an Order's last render, with the Order's UID: an Order deleted and made
// again under its name starts with nothing remembered.
type rememberedRender struct {
	uid  types.UID
	last lastRender
}

// get returns the last render of the Order with uid.
func (t *lastRenders) get(order types.NamespacedName, uid types.UID) (lastRender, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.orders[order]
	if !ok || r.uid != uid {
		return lastRender{}, false
	}
	return r.last, true
}

// set records the Order's last render.
func (t *lastRenders) set(order types.NamespacedName, uid types.UID, last lastRender) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]rememberedRender{}
	}
	t.orders[order] = rememberedRender{uid: uid, last: last}
}

// forget drops an Order's last render: it is gone.
func (t *lastRenders) forget(order types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.orders, order)
}

// backoff is the wait after failures in a row: first, doubled for each failure after the
// first, at most most.
func backoff(failures int, first, most time.Duration) time.Duration {
	wait := first
	for i := 1; i < failures && wait < most; i++ {
		wait *= 2
	}
	return min(wait, most)
}

// firstRetry is the wait after one failure.
func (r *Reconciler) firstRetry() time.Duration {
	if r.RetryAfter > 0 {
		return r.RetryAfter
	}
	return retryAfter
}

// maxRetry is the longest wait between two failures.
func (r *Reconciler) maxRetry() time.Duration {
	most := maxRetryAfter
	if r.MaxRetryAfter > 0 {
		most = r.MaxRetryAfter
	}
	return max(most, r.firstRetry())
}

func buildFailure(err error) *failure {
	var be *build.Error
	if errors.As(err, &be) {
		return &failure{string(be.Reason), be.Error()}
	}
	return &failure{deliveryv1alpha1.ReasonRenderFailed, err.Error()}
}

// credentials reads the Product's registry credentials Secret, if it names one.
func (r *Reconciler) credentials(ctx context.Context, product *deliveryv1alpha1.Product) (oci.Credentials, *failure) {
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
		return nil, &failure{deliveryv1alpha1.ReasonSourceNotFound, fmt.Sprintf(
			"credentials Secret %q of Product %s: %v: create it or fix spec.source.credentialsRef", ref.Name, product.Name, err)}
	}
	data, ok := secret.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return nil, &failure{deliveryv1alpha1.ReasonSourceNotFound, fmt.Sprintf(
			"credentials Secret %q has no %s: make it a kubernetes.io/dockerconfigjson Secret", ref.Name, corev1.DockerConfigJsonKey)}
	}
	creds, err := oci.ParseDockerConfig(data)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonSourceNotFound, fmt.Sprintf(
			"credentials Secret %q: %v: fix its %s (`kubectl create secret docker-registry` writes a valid one), or spec.source.credentialsRef of Product %s",
			ref.Name, err, corev1.DockerConfigJsonKey, product.Name)}
	}
	return creds, nil
}

// input gathers what is rendered. The Environment is not part of it.
func (r *Reconciler) input(order *deliveryv1alpha1.Order, product *deliveryv1alpha1.Product) (build.Input, *failure) {
	in := build.Input{
		SourceURL: product.Spec.Source.URL,
		Version:   product.Spec.Source.Version,
		Render: render.Options{
			ReleaseName:     order.Name,
			TargetNamespace: render.TargetNamespace(order.Spec.TargetNamespace, product.Spec.TargetNamespace, order.Namespace),
		},
	}
	if product.Spec.Render != nil && product.Spec.Render.Helm != nil {
		h := product.Spec.Render.Helm
		in.Render.RequireChart = true
		in.Render.ReleaseName = render.ReleaseName(h.ReleaseName, order.Name)
		in.Render.IncludeCRDs = h.IncludeCRDs
		if h.Values != nil && len(h.Values.Raw) > 0 {
			if err := json.Unmarshal(h.Values.Raw, &in.Render.Values); err != nil {
				return in, &failure{deliveryv1alpha1.ReasonRenderFailed, fmt.Sprintf(
					"spec.render.helm.values of Product %s is not an object: %v", product.Name, err)}
			}
		}
	}
	if product.Spec.Images.Policy == deliveryv1alpha1.ImagePolicyVendor {
		in.VendorRegistry = product.Spec.Images.Registry
		if in.VendorRegistry == "" {
			in.VendorRegistry = r.Config.BundledRegistry
		}
	}
	return in, nil
}

// builder pulls and pushes for an Order of namespace: with the Product's credentials, and as
// the pusher in the bundled registry, where it reaches only namespace's own Preparations and
// vendored images (vendored under vendor/<namespace>/).
func (r *Reconciler) builder(ctx context.Context, creds oci.Credentials, namespace string) (*build.Builder, *failure) {
	creds, err := r.withPusher(ctx, creds, namespace)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
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

// renderer renders namespace's Orders in a process of its own, held to the render budgets'
// memory and timeout, with a child started ahead for each render slot so that no render waits
// for its start; a child kept after a render renders only namespace's.
func (r *Reconciler) renderer(namespace string) isolate.Process {
	b := r.Config.RenderBudgets.WithDefaults()
	workers := r.Config.RenderWorkers
	if workers <= 0 {
		workers = config.DefaultRenderWorkers
	}
	return isolate.Process{Memory: b.Memory, Timeout: b.Timeout, Warm: workers, Namespace: namespace}
}

// bundled says whether images vendored into registry live in the bundled registry.
func (r *Reconciler) bundled(registry string) bool {
	return registry != "" && registry == r.Config.BundledRegistry
}

// artifactRepository is where an Order's Preparations are pushed: the bundled registry,
// repository kokumi/<namespace>/<order>.
func (r *Reconciler) artifactRepository(order *deliveryv1alpha1.Order) string {
	return r.Config.BundledRegistry + "/" + preparation.OwnArtifactPath(order.Namespace, order.Name)
}

// preparations finds the Order's Preparation with configHash, if any, and its newest one.
func (r *Reconciler) preparations(ctx context.Context, order *deliveryv1alpha1.Order, configHash string) (existing, latest *deliveryv1alpha1.Preparation, err error) {
	var list deliveryv1alpha1.PreparationList
	if err := r.List(ctx, &list, client.InNamespace(order.Namespace), client.MatchingLabels{preparation.LabelOrder: order.Name}); err != nil {
		return nil, nil, fmt.Errorf("list preparations of order %s: %w", order.Name, err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if !metav1.IsControlledBy(p, order) {
			continue
		}
		if p.Spec.ConfigHash == configHash {
			existing = p
		}
		if p.Name == order.Status.LatestPreparation {
			latest = p
		}
	}
	if latest == nil {
		for i := range list.Items {
			p := &list.Items[i]
			if metav1.IsControlledBy(p, order) && (latest == nil || latest.CreationTimestamp.Before(&p.CreationTimestamp)) {
				latest = p
			}
		}
	}
	return existing, latest, nil
}

func newPreparation(order *deliveryv1alpha1.Order, product *deliveryv1alpha1.Product, in build.Input,
	built *build.Built, repository, artifactDigest, parent string, bundled bool) *deliveryv1alpha1.Preparation {
	pins := make([]deliveryv1alpha1.ImagePin, 0, len(built.Images))
	for _, p := range built.Images {
		pins = append(pins, deliveryv1alpha1.ImagePin{Original: p.Original, Pinned: p.Pinned})
	}
	releaseName := ""
	if in.Render.RequireChart || strings.Contains(string(built.Manifests), "helm.sh/chart") {
		releaseName = in.Render.ReleaseName
	}
	var annotations map[string]string
	if authors := preparation.AuthorsAnnotation(order, product); authors != "" {
		// Who wrote what it is made of: a gate that asks separation refuses their approvals.
		annotations = map[string]string{preparation.AnnotationAuthors: authors}
	}
	return &deliveryv1alpha1.Preparation{
		ObjectMeta: metav1.ObjectMeta{
			Name:        preparation.Name(order.Name, artifactDigest),
			Namespace:   order.Namespace,
			Labels:      shard.Inherit(order, map[string]string{preparation.LabelOrder: order.Name, preparation.LabelProduct: product.Name}),
			Annotations: annotations,
		},
		Spec: deliveryv1alpha1.PreparationSpec{
			OrderRef:                deliveryv1alpha1.LocalObjectReference{Name: order.Name},
			ProductRef:              deliveryv1alpha1.LocalObjectReference{Name: product.Name},
			Source:                  deliveryv1alpha1.PreparationSource{URL: in.SourceURL, Version: in.Version, Digest: built.SourceDigest},
			ReleaseName:             releaseName,
			TargetNamespace:         in.Render.TargetNamespace,
			Images:                  pins,
			ImagesInBundledRegistry: bundled && len(pins) > 0,
			Artifact:                deliveryv1alpha1.Artifact{Ref: "oci://" + repository + "@" + artifactDigest, Digest: artifactDigest},
			ConfigHash:              built.ConfigHash,
			ConfigurationDigest:     built.ConfigurationDigest,
			HiddenImages:            hiddenImages(built.Hidden),
			ParentDigest:            parent,
		},
	}
}

// hiddenImages records the images found outside the pod specs Kokumi pins, if any.
func hiddenImages(h images.Hidden) *deliveryv1alpha1.HiddenImages {
	if len(h.Digests) == 0 && h.Pinned() {
		return nil
	}
	return &deliveryv1alpha1.HiddenImages{Digests: h.Digests, Unpinned: h.Unpinned, Omitted: int32(min(h.Omitted, math.MaxInt32))}
}

// markReady sets the new Preparation's Ready condition.
func (r *Reconciler) markReady(ctx context.Context, prep *deliveryv1alpha1.Preparation) error {
	if meta.IsStatusConditionTrue(prep.Status.Conditions, deliveryv1alpha1.ConditionReady) {
		return nil
	}
	if prep.ResourceVersion == "" {
		if err := r.Get(ctx, client.ObjectKeyFromObject(prep), prep); err != nil {
			return fmt.Errorf("get preparation %s: %w", prep.Name, err)
		}
	}
	base := prep.DeepCopy()
	meta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: deliveryv1alpha1.ReasonRendered,
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

// setRendered records prep, rendered from inputs (see inputsHash), as the Order's latest.
func (r *Reconciler) setRendered(order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation, created bool, inputs string) {
	r.renders.set(types.NamespacedName{Namespace: order.Namespace, Name: order.Name}, order.UID, lastRender{inputs: inputs, preparation: prep.Name})
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
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: deliveryv1alpha1.ReasonRendered,
		Message: shorten(msg), ObservedGeneration: order.Generation,
	})
}

// setFailed sets Ready=False, its message f's followed by retry (when it is tried again), and
// records a Warning event when the reason or f's message changed.
func (r *Reconciler) setFailed(order *deliveryv1alpha1.Order, before *deliveryv1alpha1.OrderStatus, f *failure, retry string) {
	what := shorten(f.Message)
	msg := what
	if retry != "" {
		what = text.ShortenMiddle(f.Message, text.MaxMessage-len(retrySeparator)-len(retry))
		msg = what + retrySeparator + retry
	}
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: f.Reason,
		Message: msg, ObservedGeneration: order.Generation,
	})
	old := meta.FindStatusCondition(before.Conditions, deliveryv1alpha1.ConditionReady)
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
func (r *Reconciler) promote(ctx context.Context, order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation) (verdict promotion.Verdict, err error) {
	verdict.Allowed = true
	var serving deliveryv1alpha1.Serving
	err = r.Get(ctx, client.ObjectKeyFromObject(order), &serving)
	if err != nil && !apierrors.IsNotFound(err) {
		return verdict, fmt.Errorf("get serving %s: %w", order.Name, err)
	}
	exists := err == nil
	want := ""
	if order.Spec.Promotion.Mode == deliveryv1alpha1.PromotionAutomatic && meta.IsStatusConditionTrue(prep.Status.Conditions, deliveryv1alpha1.ConditionReady) &&
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
		serving = deliveryv1alpha1.Serving{
			ObjectMeta: metav1.ObjectMeta{Name: order.Name, Namespace: order.Namespace, Labels: shard.Inherit(order, nil)},
			Spec:       deliveryv1alpha1.ServingSpec{OrderRef: deliveryv1alpha1.LocalObjectReference{Name: order.Name}, PreparationName: want},
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
