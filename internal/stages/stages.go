// Package stages reads the evidence of a promotion pipeline's stages (what each required
// Environment's Serving runs, since when, and the signed deployment records attached to its
// artifact) and hands it to the pure gate in internal/promotion; its watch handlers bring back the
// Orders and Servings downstream of a change.
package stages

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
)

// TrustedKeySource lists the public keys whose records Kokumi trusts.
type TrustedKeySource interface {
	Trusted(ctx context.Context) (record.TrustedKeys, error)
}

// Pipeline evaluates promotion pipelines (Environment.spec.requires) against what the
// namespace's Servings run and the signed records attached to their artifacts.
type Pipeline struct {
	// Client reads Orders, Servings, Preparations and Environments.
	Client client.Reader
	// Records reads and verifies records in the registry.
	Records *record.Store
	// Keys lists the trusted public keys.
	Keys TrustedKeySource
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// BundledRegistry is the bundled registry's address now (see ArtifactLocation).
	BundledRegistry string
	// Namespace is Kokumi's namespace, where the key ConfigMaps of spec.signedSources are.
	Namespace string
	// KeyReader reads them; nil means Client.
	KeyReader client.Reader
}

// NewPipeline returns the Pipeline of a Kokumi installation: records in the registries Kokumi
// pushes to (the bundled one signed in to as the pusher, its credentials read through
// reader), keys in its namespace.
func NewPipeline(c client.Client, reader client.Reader, cfg config.Config) *Pipeline {
	if reader == nil {
		reader = c
	}
	return &Pipeline{
		Client:  c,
		Records: &record.Store{Client: bundled.Pusher(reader, cfg)},
		Keys:    &record.Keys{Client: c, Reader: reader, Namespace: cfg.Namespace},

		BundledRegistry: cfg.BundledRegistry,
		Namespace:       cfg.Namespace,
		KeyReader:       reader,
	}
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Check decides whether prep may be promoted to the Environment environment of namespace.
// An Environment without requirements, or one that does not exist (the Serving says so),
// allows it.
func (p *Pipeline) Check(ctx context.Context, namespace, environment string, prep *v1.Preparation) (promotion.Verdict, error) {
	var envs v1.EnvironmentList
	if err := p.Client.List(ctx, &envs, client.InNamespace(namespace)); err != nil {
		return promotion.Verdict{}, fmt.Errorf("list Environments of namespace %s: %w", namespace, err)
	}
	for i := range envs.Items {
		if e := &envs.Items[i]; e.Name == environment && e.Spec.SignedSources != nil {
			if verdict := p.signedSources(ctx, e, prep); !verdict.Allowed {
				return verdict, nil
			}
		}
	}
	graph := promotion.NewGraph(envs.Items)
	in := graph.Input(namespace, environment, ReleaseOf(prep), p.now())
	if len(in.Requires) == 0 {
		return promotion.Verdict{Allowed: true}, nil
	}
	if len(in.Cycle) > 0 {
		return promotion.Evaluate(in), nil
	}
	wanted := make(map[string]v1.StageMatch, len(in.Requires))
	for _, st := range in.Requires {
		wanted[st.Environment] = st.Match
	}
	var orders v1.OrderList
	if err := p.Client.List(ctx, &orders, client.InNamespace(namespace)); err != nil {
		return promotion.Verdict{}, fmt.Errorf("list Orders of namespace %s: %w", namespace, err)
	}
	var keys *record.TrustedKeys
	for i := range orders.Items {
		o := &orders.Items[i]
		match, ok := wanted[o.Spec.EnvironmentRef.Name]
		if !ok || !o.DeletionTimestamp.IsZero() {
			continue
		}
		run, err := p.run(ctx, o, in.Release, match, &keys)
		if err != nil {
			return promotion.Verdict{}, err
		}
		if run != nil {
			in.Runs = append(in.Runs, *run)
		}
	}
	return promotion.Evaluate(in), nil
}

// signedSources admits prep to Environment env, which asks for signed sources, only when its
// render verified its source and every image, each signed by a key of env's ConfigMaps: its
// spec.provenance, which only Kokumi writes, says which keys signed them.
func (p *Pipeline) signedSources(ctx context.Context, env *v1.Environment, prep *v1.Preparation) promotion.Verdict {
	reader := p.KeyReader
	if reader == nil {
		reader = p.Client
	}
	field := "spec.signedSources.publicKeys of Environment " + env.Name
	keys, err := sourcesig.TrustedKeys(ctx, reader, p.Namespace, field, env.Spec.SignedSources.PublicKeys)
	if err != nil {
		return promotion.Verdict{Message: fmt.Sprintf("Environment %s admits only signed sources, and its keys cannot be read: %v", env.Name, err)}
	}
	want := fmt.Sprintf("Environment %s admits only Preparations whose source and images were verified as signed by keys of %s (%s)",
		env.Name, strings.Join(env.Spec.SignedSources.PublicKeys, ", "), keys.Set())
	pv := prep.Spec.Provenance
	switch {
	case pv == nil || pv.Sources != v1.SourcesVerified:
		return promotion.Verdict{Message: fmt.Sprintf("%s; %s was rendered without verification: ask for it in its Product's spec.verify", want, prep.Name)}
	case len(pv.VerifiedBy) == 0:
		return promotion.Verdict{Message: fmt.Sprintf("%s; %s names no key that signed its inputs", want, prep.Name)}
	}
	for _, id := range pv.VerifiedBy {
		if !slices.Contains(keys.IDs(), id) {
			return promotion.Verdict{Message: fmt.Sprintf("%s; an input of %s was signed by key %s: have its Product's spec.verify trust only keys of the Environment", want, prep.Name, id)}
		}
	}
	return promotion.Verdict{Allowed: true}
}

// run reads what Order o runs: its Serving's Preparation, whether it is Deployed and since
// when, and, for the release asked about (the same under match), the records attached to its
// artifact.
func (p *Pipeline) run(ctx context.Context, o *v1.Order, release promotion.Release, match v1.StageMatch, keys **record.TrustedKeys) (*promotion.Run, error) {
	var s v1.Serving
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Serving %s/%s: %w", o.Namespace, o.Name, err)
	}
	if s.Spec.PreparationName == "" {
		return nil, nil
	}
	var prep v1.Preparation
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: s.Spec.PreparationName}, &prep); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Preparation %s/%s: %w", o.Namespace, s.Spec.PreparationName, err)
	}
	run := &promotion.Run{Order: o.Name, Environment: o.Spec.EnvironmentRef.Name, Preparation: prep.Name, Release: ReleaseOf(&prep)}
	// A revocation the Preparation's status lists holds whatever the registry holds now: only
	// Kokumi writes that status, and a tenant who can write the registry can remove one there.
	for _, rev := range prep.Status.Revocations {
		if rev.Environment == run.Environment {
			run.Revocations = append(run.Revocations, promotion.Revoked{Digest: rev.Digest, Record: rev.Record,
				Verification: rev.Verification, Message: rev.Message, Time: rev.Time.Time})
		}
	}
	if c := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady); c != nil {
		run.State = c.Reason
		// The soak counts from when this revision became Deployed (status.deployedSince).
		since, deployed := s.Status.DeployedAt(prep.Spec.Artifact.Digest)
		run.Deployed, run.Since = deployed && c.ObservedGeneration == s.Generation, since
		if c.ObservedGeneration == s.Generation {
			run.PassedWaves = rollout.PassedWaves(s.Status.Rollout, prep.Name)
		}
	}
	if !release.Same(run.Release, match) || (!run.Deployed && len(run.PassedWaves) == 0) {
		return run, nil
	}
	if *keys == nil {
		k, err := p.Keys.Trusted(ctx)
		if err != nil {
			// An admin's broken key list holds the stage, and says so where people look.
			run.RecordsError = fmt.Sprintf("the list of trusted public keys is unreadable (%v): an admin fixes it", err)
			return run, nil
		}
		*keys = &k
	}
	repository, _ := preparation.ArtifactLocation(p.BundledRegistry, &prep)
	ctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	attested, err := p.Records.Attestations(ctx, repository, prep.Spec.Artifact.Digest, **keys)
	if err != nil {
		// The registry may be down for a while: the stage waits and says so.
		run.RecordsError = fmt.Sprintf("reading them from %s failed: %v", repository, err)
	}
	run.Records = attested.Records
	run.Revocations = append(run.Revocations, registryRevocations(attested.Revocations, o, run.Revocations)...)
	return run, nil
}

// registryRevocations are the revocations attached to the artifact that verify with a trusted
// key and revoke Order o's record in its Environment, less those the status listed (known).
func registryRevocations(attached []record.Revocation, o *v1.Order, known []promotion.Revoked) []promotion.Revoked {
	var out []promotion.Revoked
	for _, r := range attached {
		p := r.Predicate
		if !r.Verified || p.Namespace != o.Namespace || p.Order != o.Name || p.Environment != o.Spec.EnvironmentRef.Name {
			continue
		}
		if slices.ContainsFunc(known, func(k promotion.Revoked) bool { return k.Digest == r.Digest }) {
			continue
		}
		out = append(out, promotion.Revoked{Digest: r.Digest, Record: p.Revokes, Verification: p.Check.Name, Message: p.Check.Message, Time: p.Time})
	}
	return out
}

// ReleaseOf is the release a Preparation carries (see promotion.NewRelease): its source
// digest, image digests (hidden ones by digest included), render configuration and the
// images it could not pin.
func ReleaseOf(prep *v1.Preparation) promotion.Release {
	c := promotion.Contents{SourceDigest: prep.Spec.Source.Digest, Configuration: prep.Spec.ConfigurationDigest,
		Images: make([]string, len(prep.Spec.Images))}
	for i, img := range prep.Spec.Images {
		c.Images[i] = img.Pinned
	}
	if h := prep.Spec.HiddenImages; h != nil {
		c.HiddenDigests, c.Unpinned, c.UnpinnedOmitted = h.Digests, h.Unpinned, int(h.Omitted)
	}
	return promotion.NewRelease(c)
}

// Gate is the PromotionGate of Automatic Orders: the pipeline of the Order's Environment.
func (p *Pipeline) Gate(ctx context.Context, order *v1.Order, prep *v1.Preparation) (promotion.Verdict, error) {
	return p.Check(ctx, order.Namespace, order.Spec.EnvironmentRef.Name, prep)
}

// downstream lists the Orders (and so Servings, of the same names) of namespace whose
// Environment requires the Environment of Order order: a change of what order runs may let
// them promote.
func downstream(ctx context.Context, c client.Reader, namespace, order string) []reconcile.Request {
	var o v1.Order
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: order}, &o); err != nil {
		return nil
	}
	var envs v1.EnvironmentList
	if err := c.List(ctx, &envs, client.InNamespace(namespace)); err != nil {
		log.FromContext(ctx).Error(err, "list Environments", "namespace", namespace)
		return nil
	}
	after := promotion.NewGraph(envs.Items).Downstream(o.Spec.EnvironmentRef.Name)
	if len(after) == 0 {
		return nil
	}
	var orders v1.OrderList
	if err := c.List(ctx, &orders, client.InNamespace(namespace)); err != nil {
		log.FromContext(ctx).Error(err, "list Orders", "namespace", namespace)
		return nil
	}
	var out []reconcile.Request
	for _, d := range orders.Items {
		if after[d.Spec.EnvironmentRef.Name] {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&d)})
		}
	}
	return out
}

// DownstreamOf maps a Serving or a Preparation to the Orders downstream of its Order.
func DownstreamOf(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		switch obj := o.(type) {
		case *v1.Serving:
			return downstream(ctx, c, obj.Namespace, obj.Spec.OrderRef.Name)
		case *v1.Preparation:
			return downstream(ctx, c, obj.Namespace, obj.Spec.OrderRef.Name)
		}
		return nil
	})
}

// EvidenceChanged passes the updates that can change a stage's verdict: a Serving's
// Ready condition or promoted Preparation, a Preparation's records or revocations.
var EvidenceChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		switch o := e.ObjectOld.(type) {
		case *v1.Serving:
			n := e.ObjectNew.(*v1.Serving)
			return o.Spec.PreparationName != n.Spec.PreparationName || o.Status.Revision != n.Status.Revision ||
				!equality.Semantic.DeepEqual(apimeta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady),
					apimeta.FindStatusCondition(n.Status.Conditions, v1.ConditionReady))
		case *v1.Preparation:
			n := e.ObjectNew.(*v1.Preparation)
			return !equality.Semantic.DeepEqual(o.Status.DeploymentRecords, n.Status.DeploymentRecords) ||
				!equality.Semantic.DeepEqual(o.Status.Revocations, n.Status.Revocations)
		}
		return false
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}
