package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/text"
)

const (
	// registryTimeout bounds how long a request waits for a registry (deployment records): a
	// registry that is down makes a short message, not a stuck page.
	registryTimeout = 5 * time.Second
	// recordsTTL is how long the Serving page reuses the records it read of an artifact; a new
	// record listed in the Preparation's status reads them again at once.
	recordsTTL = 30 * time.Second
	// keysTTL is how long the trusted public keys are reused before they are read again.
	keysTTL = 10 * time.Second
	// maxProblem caps an error the Serving page shows.
	maxProblem = 300
)

// pipelineOf checks the stages of the Order's Environment; nil when it requires none.
func (s *Server) pipelineOf(ctx context.Context, sv *v1.Serving, order *v1.Order, preps []v1.Preparation) *view.Pipeline {
	if order == nil {
		return nil
	}
	var env v1.Environment
	key := client.ObjectKey{Namespace: sv.Namespace, Name: order.Spec.EnvironmentRef.Name}
	if err := s.client.Get(ctx, key, &env); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil // the Serving says so
		}
		return &view.Pipeline{Environment: key.Name, Stages: []view.Stage{}, Error: text.Truncate(fmt.Sprintf("get Environment %s: %v", key.Name, err), maxProblem)}
	}
	if len(env.Spec.Requires) == 0 {
		return nil
	}
	p := &view.Pipeline{Environment: env.Name, Stages: []view.Stage{}}
	prep := pipelinePreparation(sv, preps)
	if prep == nil {
		p.Message = "the Order has no Preparation yet"
		for _, r := range view.RequirementsOf(&env) {
			p.Stages = append(p.Stages, view.Stage{Environment: r.Environment, State: string(promotion.Waiting), Soak: r.Soak, Match: r.Match})
		}
		return p
	}
	p.Preparation = prep.Name
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	verdict, err := s.pipeline.Check(ctx, sv.Namespace, env.Name, prep)
	if err != nil {
		p.Error = text.Truncate(err.Error(), maxProblem)
		return p
	}
	p.Allowed, p.Message = verdict.Allowed, verdict.Message
	for _, st := range verdict.Stages {
		stage := view.Stage{Environment: st.Environment, State: string(st.State), Message: st.Message, Match: string(st.Match), Order: st.Order, Record: st.Record}
		if st.Soak > 0 {
			stage.Soak = promotion.Duration(st.Soak)
		}
		if st.State == promotion.Soaking {
			stage.Left, stage.LeftSeconds = promotion.Duration(st.Soak-st.Elapsed), int64((st.Soak - st.Elapsed).Seconds())
		}
		if st.Order != "" {
			// A Serving has its Order's name.
			if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: st.Order}, &v1.Serving{}); err == nil {
				stage.Serving = st.Order
			}
		}
		p.Stages = append(p.Stages, stage)
	}
	return p
}

// pipelinePreparation picks the Preparation whose stages the Serving page shows: the one the
// Serving waits to deploy (AwaitingStage), else the Order's newest Ready one (the next to
// promote), else the one the Serving deploys, else the newest. preps are newest first.
func pipelinePreparation(sv *v1.Serving, preps []v1.Preparation) *v1.Preparation {
	var deployed, newestReady *v1.Preparation
	for i := range preps {
		if preps[i].Name == sv.Spec.PreparationName {
			deployed = &preps[i]
		}
		if newestReady == nil && apimeta.IsStatusConditionTrue(preps[i].Status.Conditions, v1.ConditionReady) {
			newestReady = &preps[i]
		}
	}
	if c := apimeta.FindStatusCondition(sv.Status.Conditions, v1.ConditionReady); deployed != nil && c != nil && c.Reason == v1.ReasonAwaitingStage {
		return deployed
	}
	switch {
	case newestReady != nil:
		return newestReady
	case deployed != nil:
		return deployed
	case len(preps) > 0:
		return &preps[0]
	}
	return nil
}

// recordsOf reads the deployment records of the Preparation the Serving deploys; nil when it
// deploys none, or there are none.
func (s *Server) recordsOf(ctx context.Context, sv *v1.Serving, preps []v1.Preparation) *view.Records {
	var prep *v1.Preparation
	for i := range preps {
		if preps[i].Name == sv.Spec.PreparationName {
			prep = &preps[i]
		}
	}
	if prep == nil || prep.Spec.Artifact.Digest == "" {
		return nil
	}
	repository := artifactRepository(s.opts.BundledRegistry, prep)
	out := &view.Records{Preparation: prep.Name, Artifact: repository + "@" + prep.Spec.Artifact.Digest, Items: []view.RecordRow{}}
	out.Verify = CosignVerifyCommand(out.Artifact)
	recs, err := s.readRecords(ctx, prep, repository)
	if err != nil {
		out.Error = text.Truncate(err.Error(), maxProblem)
		for _, r := range prep.Status.DeploymentRecords {
			t := r.Time.Time
			out.Items = append(out.Items, view.RecordRow{Digest: r.Digest, Environment: r.Environment, Clusters: int(r.Clusters), Time: &t, KeyID: r.KeyID})
		}
	} else {
		for i := len(recs) - 1; i >= 0; i-- { // attached oldest first
			r := recs[i]
			row := view.RecordRow{
				Digest: r.Digest, Environment: r.Predicate.Environment, Order: r.Predicate.Order, Clusters: len(r.Predicate.Clusters),
				KeyID: r.KeyID, Verified: r.Verified, Problem: r.Problem,
			}
			if !r.Predicate.Time.IsZero() {
				t := r.Predicate.Time
				row.Time = &t
			}
			out.Items = append(out.Items, row)
		}
	}
	if len(out.Items) == 0 && out.Error == "" {
		return nil
	}
	out.Items, out.ItemsOmitted = view.CapRows(out.Items)
	return out
}

// readRecords reads and verifies the records of prep's artifact, through a short cache: the
// page is fetched again on every change of the fleet.
func (s *Server) readRecords(ctx context.Context, prep *v1.Preparation, repository string) ([]record.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	keys, err := s.pipeline.Keys.Trusted(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the trusted public keys: %w", err)
	}
	newest := ""
	if len(prep.Status.DeploymentRecords) > 0 {
		newest = prep.Status.DeploymentRecords[0].Digest
	}
	key := strings.Join([]string{repository, prep.Spec.Artifact.Digest, newest, strings.Join(keys.IDs(), ",")}, "|")
	if e, ok := s.records.get(key); ok {
		return e.records, e.err
	}
	recs, err := s.pipeline.Records.Records(ctx, repository, prep.Spec.Artifact.Digest, keys)
	if err != nil {
		err = fmt.Errorf("read the records from %s: %w", repository, err)
	}
	s.records.put(key, recordEntry{records: recs, err: err}, s.records.now().Add(recordsTTL))
	return recs, err
}

// artifactRepository is the repository (host/path) of a Preparation's artifact now, in the
// bundled registry at its address bundled should it have moved.
func artifactRepository(bundled string, prep *v1.Preparation) string {
	repository, _ := preparation.ArtifactLocation(bundled, prep)
	return repository
}

// recordEntry is what was read of an artifact's records, kept for recordsTTL.
type recordEntry struct {
	records []record.Record
	err     error
}

// maxCachedArtifacts bounds the artifacts whose records are kept.
const maxCachedArtifacts = 512

// trustedKeys reads the trusted public keys at most every keysTTL. A failed read is not kept,
// nor an empty list (the controller has not made its key yet, and soon will).
type trustedKeys struct {
	source stages.TrustedKeySource

	mu   sync.Mutex
	keys record.TrustedKeys
	at   time.Time
}

// Trusted implements stages.TrustedKeySource.
func (t *trustedKeys) Trusted(ctx context.Context) (record.TrustedKeys, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.at.IsZero() && time.Since(t.at) < keysTTL {
		return t.keys, nil
	}
	keys, err := t.source.Trusted(ctx)
	if err != nil {
		return record.TrustedKeys{}, err
	}
	if len(keys.IDs()) > 0 {
		t.keys, t.at = keys, time.Now()
	}
	return keys, nil
}

// uncached is a client whose Get goes to the API server: the server reads the public-key
// ConfigMap with it, which it may get but not list or watch.
type uncached struct {
	client.Client
	reader client.Reader
}

// Get reads obj from the API server.
func (u uncached) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return u.reader.Get(ctx, key, obj, opts...)
}
