package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=preparations;servings;orders,verbs=get;list;watch

// Defaults of the Sweeper.
const (
	// SweepPeriod is how often the Sweeper makes a pass.
	SweepPeriod = 10 * time.Minute
	// SweepGrace is how long after the last push to a repository the Sweeper leaves it alone:
	// longer than a render takes from vendoring its images and pushing its artifact to creating
	// its Preparation (the bundled registry's own garbage collection keeps new blobs as long).
	SweepGrace = 10 * time.Minute
	// sweepAfterOrderDeletion is how long after an Order's deletion a pass starts: time for
	// Kubernetes' garbage collector to delete its Preparations.
	sweepAfterOrderDeletion = time.Minute
)

// SweepBudget bounds one pass of the Sweeper; the next pass goes on where it stopped.
type SweepBudget struct {
	// Repositories is the most repositories one pass looks at.
	Repositories int
	// Manifests is the most manifests one pass looks at.
	Manifests int
	// Deletions is the most manifests one pass deletes.
	Deletions int
}

// DefaultSweepBudget is the budget of a pass of the installed Sweeper.
var DefaultSweepBudget = SweepBudget{Repositories: 500, Manifests: 5000, Deletions: 200}

// Sweeper deletes, in the bundled registry, the manifests of Kokumi's repositories that nothing
// names: under kokumi/<namespace>/ (the artifacts of Preparations, and their deployment
// records) and vendor/<namespace>/ (vendored images), a manifest is kept while a Preparation of
// the namespace names it (its artifact, or an image it pins), a Serving of the namespace runs
// it, it is the index of such an image or a platform of such an index, the deployment records
// of such an artifact, or a tagged manifest that is not deployment records. Everything else goes:
// the artifacts of deleted Orders and namespaces, images no Preparation pins any more, the
// deployment records of deleted artifacts and the ones a newer record replaced, and artifacts
// the collector of old Preparations could not delete. A repository pushed to within Grace is
// left alone for that pass, and the registry refuses the deletion of a manifest from a
// repository pushed to since the pass decided (oci.Client.DeleteManifestUnmodifiedSince), so
// that a render between its push and its Preparation keeps what it pushed. What the
// namespace's Preparations and Servings name is read from the API server, and read again
// right before each deletion. A pass is bounded by Budget.
type Sweeper struct {
	// Reader reads Preparations and Servings from the API server.
	Reader client.Reader
	// Registry lists and deletes in the bundled registry, signed in as the pusher.
	Registry *oci.Client
	// Config gives the bundled registry.
	Config config.Config
	// Grace is how long a repository is left alone after a push to it.
	Grace time.Duration
	// Period is how often a pass is made.
	Period time.Duration
	// Budget bounds a pass.
	Budget SweepBudget
	// Now tells the time; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	// cursor is where the next pass starts: after the repository repo of the catalog, or in it
	// after the manifest digest.
	cursor struct{ repo, digest string }
	// wake starts a pass before the period ends.
	wake chan struct{}
}

// Swept is what a pass did.
type Swept struct {
	// Repositories counts the repositories looked at.
	Repositories int
	// Deleted lists the manifests deleted, as repository@digest.
	Deleted []string
	// Exhausted says the budget ended the pass before the end of the catalog.
	Exhausted bool
}

// SetupSweeper adds the Sweeper to mgr, with the defaults: a pass every SweepPeriod, and one
// a minute after an Order is deleted.
func SetupSweeper(mgr ctrl.Manager, cfg config.Config) error {
	if cfg.BundledRegistry == "" {
		return nil
	}
	s := &Sweeper{Reader: mgr.GetAPIReader(), Registry: bundled.Pusher(mgr.GetAPIReader(), cfg), Config: cfg,
		Grace: SweepGrace, Period: SweepPeriod, Budget: DefaultSweepBudget}
	informer, err := mgr.GetCache().GetInformer(context.Background(), &v1.Order{})
	if err != nil {
		return fmt.Errorf("set up the sweeper of the bundled registry: %w", err)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		time.AfterFunc(sweepAfterOrderDeletion, s.Wake)
	}}); err != nil {
		return fmt.Errorf("set up the sweeper of the bundled registry: %w", err)
	}
	if err := mgr.Add(s); err != nil {
		return fmt.Errorf("set up the sweeper of the bundled registry: %w", err)
	}
	return nil
}

// Wake starts a pass now, unless one is due already.
func (s *Sweeper) Wake() {
	select {
	case s.wakeChan() <- struct{}{}:
	default:
	}
}

func (s *Sweeper) wakeChan() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	return s.wake
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one replica sweeps.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: a pass at start, every Period, and on Wake, until ctx
// ends. A pass that ran out of budget is followed by the next one at once.
func (s *Sweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("registry-sweeper")
	wake := s.wakeChan()
	for {
		swept, err := s.Sweep(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.Error(err, "sweep the bundled registry", "deleted", len(swept.Deleted))
		} else if len(swept.Deleted) > 0 {
			log.Info("deleted manifests nothing names in the bundled registry", "repositories", swept.Repositories, "deleted", len(swept.Deleted))
		}
		wait := s.Period
		if swept.Exhausted && err == nil {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(wait):
		}
	}
}

// Sweep makes one pass, from where the last one stopped, within the budget.
func (s *Sweeper) Sweep(ctx context.Context) (Swept, error) {
	s.mu.Lock()
	cursor := s.cursor
	s.mu.Unlock()
	p := &pass{Sweeper: s, budget: s.Budget, named: map[string]*named{}}
	var swept Swept
	save := func(repo, digest string) {
		s.mu.Lock()
		s.cursor.repo, s.cursor.digest = repo, digest
		s.mu.Unlock()
	}
	if cursor.digest != "" {
		next, err := p.visit(ctx, cursor.repo, cursor.digest, &swept)
		if err != nil || next != "" {
			save(cursor.repo, next)
			swept.Exhausted = next != ""
			return swept, err
		}
	}
	after := cursor.repo
	for {
		if p.exhausted() {
			save(after, "")
			swept.Exhausted = true
			return swept, nil
		}
		ctxCall, cancel := context.WithTimeout(ctx, bundled.Timeout)
		repos, more, err := s.Registry.Catalog(ctxCall, s.Config.BundledRegistry, 100, after)
		cancel()
		if err != nil {
			save(after, "")
			return swept, err
		}
		for _, repo := range repos {
			if p.exhausted() {
				save(after, "")
				swept.Exhausted = true
				return swept, nil
			}
			next, err := p.visit(ctx, repo, "", &swept)
			if err != nil || next != "" {
				save(repo, next)
				swept.Exhausted = next != ""
				return swept, err
			}
			after = repo
		}
		if !more || len(repos) == 0 {
			save("", "") // the end of the catalog: the next pass starts over
			return swept, nil
		}
	}
}

// pass is one pass of the Sweeper.
type pass struct {
	*Sweeper
	budget SweepBudget
	// named caches what each namespace's objects name, read once per pass for the decision.
	named map[string]*named
}

func (p *pass) exhausted() bool {
	return p.budget.Repositories <= 0 || p.budget.Manifests <= 0 || p.budget.Deletions <= 0
}

// named is what the Preparations and Servings of a namespace name.
type named struct {
	// digests are the manifests named, in any repository.
	digests map[string]bool
	// byRepository are the manifests named in each repository (path in the bundled registry).
	byRepository map[string][]string
}

// namesOf reads from the API server what the Preparations and Servings of namespace name.
func (s *Sweeper) namesOf(ctx context.Context, namespace string) (*named, error) {
	var preps v1.PreparationList
	if err := s.Reader.List(ctx, &preps, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list the Preparations of namespace %s: %w", namespace, err)
	}
	var servings v1.ServingList
	if err := s.Reader.List(ctx, &servings, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list the Servings of namespace %s: %w", namespace, err)
	}
	n := &named{digests: map[string]bool{}, byRepository: map[string][]string{}}
	add := func(ref string) { // host/path@digest
		repository, digest, ok := strings.Cut(ref, "@")
		if !ok {
			return
		}
		n.digests[digest] = true
		if _, path, ok := strings.Cut(repository, "/"); ok {
			n.byRepository[path] = append(n.byRepository[path], digest)
		}
	}
	for i := range preps.Items {
		prep := &preps.Items[i]
		repository, digest := preparation.ArtifactLocation(s.Config.BundledRegistry, prep)
		add(repository + "@" + digest)
		for _, img := range prep.Spec.Images {
			add(img.Pinned)
		}
	}
	for i := range servings.Items {
		for _, d := range preparation.Runs(&servings.Items[i]) {
			n.digests[d] = true
		}
	}
	return n, nil
}

// ownerNamespace is the namespace a repository of the bundled registry belongs to:
// kokumi/<namespace>/… or vendor/<namespace>/…; ok is false for other repositories.
func ownerNamespace(path string) (string, bool) {
	top, rest, _ := strings.Cut(path, "/")
	if top != preparation.ArtifactDir && top != images.VendorDir {
		return "", false
	}
	namespace, rest, _ := strings.Cut(rest, "/")
	if rest == "" || len(validation.IsDNS1123Label(namespace)) > 0 {
		return "", false
	}
	return namespace, true
}

// visit sweeps the manifests of repository path after the digest from, within the budget; it
// returns the digest to go on after in the next pass when the budget ends in the repository.
func (p *pass) visit(ctx context.Context, path, from string, swept *Swept) (string, error) {
	namespace, ok := ownerNamespace(path)
	if !ok {
		return "", nil
	}
	p.budget.Repositories--
	swept.Repositories++
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	since := now().Add(-p.Grace)
	repository := p.Config.BundledRegistry + "/" + path
	callCtx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	list, err := p.Registry.Manifests(callCtx, repository, min(p.budget.Manifests, oci.MaxManifestsPage), from)
	if err != nil {
		return "", err
	}
	p.budget.Manifests -= len(list.Manifests)
	if list.Newest.After(since) || len(list.Manifests) == 0 {
		return "", nil // pushed to lately: left for a later pass
	}
	names, ok := p.named[namespace]
	if !ok {
		if names, err = p.namesOf(ctx, namespace); err != nil {
			return "", err
		}
		p.named[namespace] = names
	}
	keep, err := p.kept(callCtx, repository, path, names)
	if err != nil {
		return "", err
	}
	for _, m := range list.Manifests {
		if keep[m.Digest] {
			continue
		}
		if p.budget.Deletions <= 0 {
			return m.Digest, nil // not looked at yet: the next pass starts before it
		}
		// Right before the deletion, what the namespace names is read again.
		again, err := p.namesOf(ctx, namespace)
		if err != nil {
			return "", err
		}
		p.named[namespace] = again
		if again.digests[m.Digest] {
			continue
		}
		p.budget.Deletions--
		err = p.Registry.DeleteManifestUnmodifiedSince(callCtx, repository, m.Digest, since)
		if errors.Is(err, oci.ErrModified) {
			return "", nil // pushed to meanwhile: left for a later pass
		}
		if err != nil {
			return "", err
		}
		swept.Deleted = append(swept.Deleted, repository+"@"+m.Digest)
	}
	if list.More {
		return list.Manifests[len(list.Manifests)-1].Digest, nil
	}
	return "", nil
}

// kept lists the manifests of repository (path in the bundled registry) that stay: the ones
// names names, the platforms of the indexes among them, the deployment records of the artifacts
// among them (cosign's tag sha256-<hex>.att), and the manifests of tags that are not
// deployment records.
func (p *pass) kept(ctx context.Context, repository, path string, names *named) (map[string]bool, error) {
	keep := make(map[string]bool, len(names.digests))
	for d := range names.digests {
		keep[d] = true
	}
	repo, err := p.Registry.Repository(repository)
	if err != nil {
		return nil, err
	}
	var tags []string
	if err := repo.Tags(ctx, "", func(page []string) error {
		tags = append(tags, page...)
		return nil
	}); err != nil && !oci.IsNotFound(err) {
		return nil, fmt.Errorf("list the tags of %s: %w", repository, err)
	}
	for _, tag := range tags {
		if artifact, ok := strings.CutSuffix(tag, ".att"); ok && strings.HasPrefix(artifact, "sha256-") {
			if att, err := record.AttestationTag("sha256:" + strings.TrimPrefix(artifact, "sha256-")); err != nil || att != tag ||
				!keep["sha256:"+strings.TrimPrefix(artifact, "sha256-")] {
				continue // the records of an artifact that goes go with it
			}
		}
		// GET, not HEAD: the registry takes the pusher's HEAD for a push that found the
		// manifest there, and refuses deletions from the repository for a while.
		desc, rc, err := repo.FetchReference(ctx, tag)
		if oci.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s:%s: %w", repository, tag, err)
		}
		_ = rc.Close()
		keep[desc.Digest.String()] = true
	}
	for _, d := range names.byRepository[path] {
		desc, rc, err := repo.FetchReference(ctx, d)
		if oci.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s@%s: %w", repository, d, err)
		}
		var index ocispec.Index
		if desc.MediaType == ocispec.MediaTypeImageIndex || desc.MediaType == mediaTypeDockerManifestList {
			err = json.NewDecoder(io.LimitReader(rc, 4<<20)).Decode(&index)
		}
		_ = rc.Close()
		if err != nil {
			return nil, fmt.Errorf("read the index %s@%s: %w", repository, d, err)
		}
		for _, m := range index.Manifests {
			keep[m.Digest.String()] = true
		}
	}
	return keep, nil
}

// mediaTypeDockerManifestList is the media type of Docker's index of platforms.
const mediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
