package stages

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// MissingRecord is a stage whose signed evidence a Preparation lacks.
type MissingRecord struct {
	// Environment is the required Environment; Wave its wave, when the requirement names one.
	Environment, Wave string
	// Problem says what was found instead, short and human.
	Problem string
}

// MissingRecords checks the evidence the records alone give, whatever the stages run now: for
// each stage the Environment environment of namespace requires with verified: true, that a
// Preparation of an Order of that Environment, of the same release as prep (under the stage's
// match), carries on its artifact a verified deployment record of that Environment (or of the
// wave asked), signed by a trusted key. It returns the stages that have none, in the order
// the Environment requires them; none when every verified stage has its record, or the
// Environment requires none. A cycle of requirements is a missing record.
//
// It is the check of Kokumi's admission webhook (internal/admission): an Application of a
// later stage deploys only what the earlier stage verified. Soaks and what the stages run now
// are the gate's (Check): a record, once written, stays evidence.
func (p *Pipeline) MissingRecords(ctx context.Context, namespace, environment string, prep *v1.Preparation) ([]MissingRecord, error) {
	verified, cycle, err := p.verifiedStages(ctx, namespace, environment)
	if err != nil || cycle != nil {
		return cycle, err
	}
	if len(verified) == 0 {
		return nil, nil
	}
	var orders v1.OrderList
	if err := p.Client.List(ctx, &orders, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list Orders of namespace %s: %w", namespace, err)
	}
	var preps v1.PreparationList
	if err := p.Client.List(ctx, &preps, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list Preparations of namespace %s: %w", namespace, err)
	}
	keys, err := p.Keys.Trusted(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the trusted public keys: %w", err)
	}
	release := ReleaseOf(prep)
	var missing []MissingRecord
	for _, st := range verified {
		problem, err := p.recordOf(ctx, st, release, orders.Items, preps.Items, keys)
		if err != nil {
			return nil, err
		}
		if problem != "" {
			missing = append(missing, MissingRecord{Environment: st.Environment, Wave: st.Wave, Problem: problem})
		}
	}
	return missing, nil
}

// recordOf looks for the verified record of stage st on the artifacts of the Preparations of
// its Environment's Orders that carry release; it returns "" when one is there, else what was
// found instead.
func (p *Pipeline) recordOf(ctx context.Context, st promotion.Stage, release promotion.Release,
	orders []v1.Order, preps []v1.Preparation, keys record.TrustedKeys) (string, error) {
	inStage := map[string]bool{}
	for _, o := range orders {
		if o.Spec.EnvironmentRef.Name == st.Environment {
			inStage[o.Name] = true
		}
	}
	problem := fmt.Sprintf("no Preparation of an Order of Environment %s carries this release", st.Environment)
	for i := range preps {
		cand := &preps[i]
		if !inStage[cand.Spec.OrderRef.Name] || !release.Same(ReleaseOf(cand), st.Match) {
			continue
		}
		repository, digest := preparation.ArtifactLocation(p.BundledRegistry, cand)
		rctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
		recs, err := p.Records.Records(rctx, repository, digest, keys)
		cancel()
		if err != nil {
			return "", fmt.Errorf("read the records of %s@%s (Preparation %s): %w", repository, digest, cand.Name, err)
		}
		run := &promotion.Run{Order: cand.Spec.OrderRef.Name, Environment: st.Environment, Records: recs}
		if rec, _ := promotion.Evidence(cand.Namespace, run, "", true); rec != nil {
			return "", nil
		}
		if st.Wave != "" {
			if rec, _ := promotion.Evidence(cand.Namespace, run, st.Wave, true); rec != nil {
				return "", nil
			}
		}
		_, why := promotion.Evidence(cand.Namespace, run, st.Wave, true)
		if why == "" {
			why = "none"
		}
		problem = fmt.Sprintf("Preparation %s of Environment %s carries this release, and no verified record of it signed by a trusted key (records: %s)",
			cand.Name, st.Environment, why)
	}
	return problem, nil
}

// RequiresRecords reports whether the Environment environment of namespace requires a verified
// record of a stage (its stages, as MissingRecords reads them, include one with verified:
// true), or its requirements form a cycle: whether MissingRecords may find any missing.
func (p *Pipeline) RequiresRecords(ctx context.Context, namespace, environment string) (bool, error) {
	verified, cycle, err := p.verifiedStages(ctx, namespace, environment)
	return len(verified) > 0 || cycle != nil, err
}

// verifiedStages returns the stages the Environment environment of namespace requires with
// verified: true, in the order it requires them; or, when its requirements form a cycle, that
// cycle as the one missing record.
func (p *Pipeline) verifiedStages(ctx context.Context, namespace, environment string) ([]promotion.Stage, []MissingRecord, error) {
	var envs v1.EnvironmentList
	if err := p.Client.List(ctx, &envs, client.InNamespace(namespace)); err != nil {
		return nil, nil, fmt.Errorf("list Environments of namespace %s: %w", namespace, err)
	}
	graph := promotion.NewGraph(envs.Items)
	if cycle := graph.Cycle(environment); len(cycle) > 0 {
		return nil, []MissingRecord{{Environment: environment, Problem: fmt.Sprintf("the Environments' requirements form a cycle (%v)", cycle)}}, nil
	}
	var verified []promotion.Stage
	for _, st := range graph.Stages(environment) {
		if st.Verified {
			verified = append(verified, st)
		}
	}
	return verified, nil, nil
}
