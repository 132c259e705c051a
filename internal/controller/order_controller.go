package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// Labels on the Preparations Kokumi creates.
const (
	// LabelOrder names the Order a Preparation was rendered for.
	LabelOrder = "delivery.kokumi.dev/order"
	// LabelProduct names the Product a Preparation was rendered from.
	LabelProduct = "delivery.kokumi.dev/product"

	// productRefIndex indexes Orders by spec.productRef.name.
	productRefIndex = "spec.productRef.name"
	// retryAfter is when a failed render is tried again without any change.
	retryAfter = time.Minute
	// resync is how often a rendered Order renders again to notice moved tags.
	resync = 10 * time.Minute
	// renderTimeout bounds one render: pull, images and push.
	renderTimeout = 5 * time.Minute
	// maxMessage is the longest condition message Kokumi writes.
	maxMessage = 1024
)

// PromotionGate decides whether an Order in Automatic mode may promote a Preparation to its
// Serving now; when it may not yet, the verdict says why and when to look again. The
// promotion pipeline of the Order's Environment (Pipeline.Gate) plugs in here.
type PromotionGate func(ctx context.Context, order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation) (promotion.Verdict, error)

// OrderReconciler renders an Order's Product into Preparations and keeps its Serving.
type OrderReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server, so that Kokumi caches none;
	// nil reads them through Client.
	APIReader client.Reader
	// Recorder records events on new Preparations and failure transitions.
	Recorder events.EventRecorder
	// Config is Kokumi's configuration (the bundled registry).
	Config Config
	// Gate holds Automatic promotion back; nil promotes at once.
	Gate PromotionGate
	// RetryAfter is when a failed render is tried again without any change (default a minute).
	RetryAfter time.Duration
	// Resync is how often a rendered Order renders again, so that an image tag or source tag
	// that moved makes a new Preparation (default ten minutes).
	Resync time.Duration
}

func init() { setups = append(setups, setupOrder) }

func setupOrder(mgr ctrl.Manager, cfg Config) error {
	r := &OrderReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kokumi-order"), Config: cfg,
		Gate: NewPipeline(mgr.GetClient(), mgr.GetAPIReader(), cfg).Gate}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler: Orders, their Preparations and Servings, and the
// Products they name.
func (r *OrderReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
		Watches(&deliveryv1alpha1.Serving{}, downstreamOf(mgr.GetClient()), builder.WithPredicates(stageEvidenceChanged)).
		Watches(&deliveryv1alpha1.Preparation{}, downstreamOf(mgr.GetClient()), builder.WithPredicates(stageEvidenceChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up order controller: %w", err)
	}
	return nil
}

func (r *OrderReconciler) ordersOfProduct(ctx context.Context, o client.Object) []reconcile.Request {
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

// Reconcile renders the Order's Product; a new result becomes a new Preparation, and the
// Serving follows the promotion mode.
func (r *OrderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	log := ctrl.LoggerFrom(ctx)
	var order deliveryv1alpha1.Order
	if err := r.Get(ctx, req.NamespacedName, &order); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !order.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	base := order.DeepCopy()
	before := &base.Status
	defer func() {
		if equality.Semantic.DeepEqual(before, &order.Status) {
			return
		}
		if perr := r.Status().Patch(ctx, &order, client.MergeFrom(base)); perr != nil {
			err = errors.Join(err, fmt.Errorf("update status of order %s: %w", req.NamespacedName, perr))
		}
	}()

	prep, failure := r.prepare(ctx, &order)
	if failure != nil {
		r.setFailed(&order, before, failure)
		if failure.Reason == deliveryv1alpha1.ReasonProductNotFound {
			return ctrl.Result{}, nil
		}
		log.Info("render failed", "reason", failure.Reason, "message", failure.Message)
		if r.RetryAfter > 0 {
			return ctrl.Result{RequeueAfter: r.RetryAfter}, nil
		}
		return ctrl.Result{RequeueAfter: retryAfter}, nil
	}
	verdict, err := r.promote(ctx, &order, prep)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !verdict.Allowed {
		c := meta.FindStatusCondition(order.Status.Conditions, deliveryv1alpha1.ConditionReady)
		meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
			Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: deliveryv1alpha1.ReasonAwaitingStage,
			Message:            shorten(verdict.Message + "; the Serving keeps running what it runs. " + c.Message),
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

// failure is a failed render: the Order's Ready reason and message.
type failure struct {
	Reason  string
	Message string
}

// prepare renders the Order and returns its Preparation, new or existing, and records it in
// the status; or returns why it failed.
func (r *OrderReconciler) prepare(ctx context.Context, order *deliveryv1alpha1.Order) (*deliveryv1alpha1.Preparation, *failure) {
	var product deliveryv1alpha1.Product
	if err := r.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: order.Spec.ProductRef.Name}, &product); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &failure{deliveryv1alpha1.ReasonProductNotFound, fmt.Sprintf(
				"Product %q does not exist in namespace %s: create it or fix spec.productRef.name", order.Spec.ProductRef.Name, order.Namespace)}
		}
		return nil, &failure{deliveryv1alpha1.ReasonProductNotFound, fmt.Sprintf("get product %q: %v", order.Spec.ProductRef.Name, err)}
	}
	creds, f := r.credentials(ctx, &product)
	if f != nil {
		return nil, f
	}
	in, f := r.input(order, &product)
	if f != nil {
		return nil, f
	}
	b, f := r.builder(ctx, creds, order.Namespace)
	if f != nil {
		return nil, f
	}
	ctx, cancel := context.WithTimeout(ctx, renderTimeout)
	defer cancel()
	built, err := b.Build(ctx, in)
	if err != nil {
		return nil, buildFailure(err)
	}
	order.Status.TargetNamespace = in.Render.TargetNamespace

	existing, latest, err := r.preparations(ctx, order, built.ConfigHash)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	if existing != nil {
		// A crash between creating a Preparation and marking it Ready leaves it not Ready, and
		// Automatic promotion would wait for it forever: mark it now.
		if err := r.markReady(ctx, existing); err != nil {
			return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
		}
		r.setRendered(order, existing, false)
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
	prep := newPreparation(order, &product, in, built, repository, artifactDigest, parent, r.bundled(in.VendorRegistry))
	if err := controllerutil.SetControllerReference(order, prep, r.Scheme()); err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, fmt.Sprintf("own preparation: %v", err)}
	}
	if err := r.Create(ctx, prep); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, fmt.Sprintf("create Preparation %s: %v", prep.Name, err)}
	}
	if err := r.markReady(ctx, prep); err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	r.setRendered(order, prep, true)
	r.Recorder.Eventf(order, prep, corev1.EventTypeNormal, deliveryv1alpha1.ReasonRendered, "Render",
		"Rendered Preparation %s (%s@%s, %d images) into %s", prep.Name, in.SourceURL, built.SourceDigest, len(built.Images), prep.Spec.Artifact.Ref)
	return prep, nil
}

func buildFailure(err error) *failure {
	var be *preparation.Error
	if errors.As(err, &be) {
		return &failure{string(be.Reason), be.Error()}
	}
	return &failure{deliveryv1alpha1.ReasonRenderFailed, err.Error()}
}

// credentials reads the Product's registry credentials Secret, if it names one.
func (r *OrderReconciler) credentials(ctx context.Context, product *deliveryv1alpha1.Product) (oci.Credentials, *failure) {
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
		return nil, &failure{deliveryv1alpha1.ReasonSourceNotFound, fmt.Sprintf("credentials Secret %q: %v", ref.Name, err)}
	}
	return creds, nil
}

// input gathers what is rendered. The Environment is not part of it.
func (r *OrderReconciler) input(order *deliveryv1alpha1.Order, product *deliveryv1alpha1.Product) (preparation.Input, *failure) {
	in := preparation.Input{
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
func (r *OrderReconciler) builder(ctx context.Context, creds oci.Credentials, namespace string) (*preparation.Builder, *failure) {
	creds, err := r.withPusher(ctx, creds)
	if err != nil {
		return nil, &failure{deliveryv1alpha1.ReasonPushFailed, err.Error()}
	}
	plain := []string{r.Config.BundledRegistry}
	own := r.ownRepositories(namespace)
	return &preparation.Builder{
		Sources: &oci.Client{Credentials: creds, PlainHTTP: plain, Allow: own},
		Images:  &images.Resolver{Credentials: creds, PlainHTTP: plain, Namespace: namespace, Allow: own},
	}, nil
}

// bundled says whether images vendored into registry live in the bundled registry.
func (r *OrderReconciler) bundled(registry string) bool {
	return registry != "" && registry == r.Config.BundledRegistry
}

// artifactRepository is where an Order's Preparations are pushed: the bundled registry,
// repository kokumi/<namespace>/<order>.
func (r *OrderReconciler) artifactRepository(order *deliveryv1alpha1.Order) string {
	return r.Config.BundledRegistry + "/" + artifactDir + "/" + order.Namespace + "/" + order.Name
}

// preparations finds the Order's Preparation with configHash, if any, and its newest one.
func (r *OrderReconciler) preparations(ctx context.Context, order *deliveryv1alpha1.Order, configHash string) (existing, latest *deliveryv1alpha1.Preparation, err error) {
	var list deliveryv1alpha1.PreparationList
	if err := r.List(ctx, &list, client.InNamespace(order.Namespace), client.MatchingLabels{LabelOrder: order.Name}); err != nil {
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

func newPreparation(order *deliveryv1alpha1.Order, product *deliveryv1alpha1.Product, in preparation.Input,
	built *preparation.Built, repository, artifactDigest, parent string, bundled bool) *deliveryv1alpha1.Preparation {
	pins := make([]deliveryv1alpha1.ImagePin, 0, len(built.Images))
	for _, p := range built.Images {
		pins = append(pins, deliveryv1alpha1.ImagePin{Original: p.Original, Pinned: p.Pinned})
	}
	releaseName := ""
	if in.Render.RequireChart || strings.Contains(string(built.Manifests), "helm.sh/chart") {
		releaseName = in.Render.ReleaseName
	}
	return &deliveryv1alpha1.Preparation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PreparationName(order.Name, artifactDigest),
			Namespace: order.Namespace,
			Labels:    map[string]string{LabelOrder: order.Name, LabelProduct: product.Name},
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
			ParentDigest:            parent,
		},
	}
}

// PreparationName is <order>-<first 10 hex digits of the artifact digest>, shortened to fit.
func PreparationName(order, artifactDigest string) string {
	short := strings.TrimPrefix(artifactDigest, "sha256:")
	if len(short) > 10 {
		short = short[:10]
	}
	if max := 253 - len(short) - 1; len(order) > max {
		order = order[:max]
	}
	return order + "-" + short
}

// markReady sets the new Preparation's Ready condition.
func (r *OrderReconciler) markReady(ctx context.Context, prep *deliveryv1alpha1.Preparation) error {
	if meta.IsStatusConditionTrue(prep.Status.Conditions, deliveryv1alpha1.ConditionReady) {
		return nil
	}
	if prep.ResourceVersion == "" {
		if err := r.Get(ctx, client.ObjectKeyFromObject(prep), prep); err != nil {
			return fmt.Errorf("get preparation %s: %w", prep.Name, err)
		}
	}
	meta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: deliveryv1alpha1.ReasonRendered,
		Message: "Rendered and pushed to " + prep.Spec.Artifact.Ref, ObservedGeneration: prep.Generation,
	})
	if err := r.Status().Update(ctx, prep); err != nil {
		return fmt.Errorf("mark preparation %s ready: %w", prep.Name, err)
	}
	return nil
}

func (r *OrderReconciler) setRendered(order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation, created bool) {
	order.Status.LatestPreparation = prep.Name
	msg := fmt.Sprintf("Preparation %s: %s@%s, %d images, artifact %s", prep.Name, prep.Spec.Source.URL,
		prep.Spec.Source.Digest, len(prep.Spec.Images), prep.Spec.Artifact.Digest)
	if !created {
		msg = "Up to date: " + msg
	}
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: deliveryv1alpha1.ReasonRendered,
		Message: shorten(msg), ObservedGeneration: order.Generation,
	})
}

// setFailed sets Ready=False, and records a Warning event when the reason or message changed.
func (r *OrderReconciler) setFailed(order *deliveryv1alpha1.Order, before *deliveryv1alpha1.OrderStatus, f *failure) {
	msg := shorten(f.Message)
	meta.SetStatusCondition(&order.Status.Conditions, metav1.Condition{
		Type: deliveryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: f.Reason,
		Message: msg, ObservedGeneration: order.Generation,
	})
	old := meta.FindStatusCondition(before.Conditions, deliveryv1alpha1.ConditionReady)
	if old == nil || old.Reason != f.Reason || old.Message != msg {
		r.Recorder.Eventf(order, nil, corev1.EventTypeWarning, f.Reason, "Render", "%s", msg)
	}
}

func shorten(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// promote keeps the Serving (same name as the Order). Automatic mode points it at the Order's
// newest Ready Preparation once the gate allows, and otherwise returns why it waits; Manual
// mode creates it empty and leaves spec.preparationName to a person.
func (r *OrderReconciler) promote(ctx context.Context, order *deliveryv1alpha1.Order, prep *deliveryv1alpha1.Preparation) (verdict promotion.Verdict, err error) {
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
			ObjectMeta: metav1.ObjectMeta{Name: order.Name, Namespace: order.Namespace},
			Spec:       deliveryv1alpha1.ServingSpec{OrderRef: deliveryv1alpha1.LocalObjectReference{Name: order.Name}, PreparationName: want},
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
	serving.Spec.PreparationName = want
	if err := r.Update(ctx, &serving); err != nil {
		return verdict, fmt.Errorf("promote %s to serving %s: %w", want, order.Name, err)
	}
	return verdict, nil
}
