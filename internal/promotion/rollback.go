package promotion

import (
	"fmt"
	"sort"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// This file holds the rule of a rollback, which the API server's rollback, its Serving page and
// the kubectl plugin's rollback all apply: what "the Preparation that ran before" is.

// OrderPreparations returns the Preparations of the Order named order among all, newest first:
// by creation, then by name. It is the order the UI, the plugin's history and RollbackTarget
// use.
func OrderPreparations(all []v1.Preparation, order string) []v1.Preparation {
	var out []v1.Preparation
	for _, p := range all {
		if p.Spec.OrderRef.Name == order {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp.Time, out[j].CreationTimestamp.Time
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// RollbackTarget picks the Preparation a rollback of a Serving that deploys current goes back
// to, among its Order's Preparations preps (newest first, as OrderPreparations returns them):
// the newest one older than current that has a deployment record (it ran healthily on the
// Order's clusters) that no revocation its status lists revoked. A Preparation that was promoted but never reached Deployed has no record,
// and is skipped. It returns a *Refusal when there is none, or when current is empty or gone.
func RollbackTarget(preps []v1.Preparation, current string) (*v1.Preparation, error) {
	return RollbackTargetIn(preps, current, "")
}

// RollbackTargetIn is RollbackTarget counting only the deployment records of Environment
// environment (all when empty): what a roll-out in waves of that Environment goes back to. A
// record of one wave (DeploymentRecord.Wave) proves less than the Environment: it counts for
// neither.
func RollbackTargetIn(preps []v1.Preparation, current, environment string) (*v1.Preparation, error) {
	to, _, err := RollbackTargetChecked(preps, current, environment, nil)
	return to, err
}

// RollbackTargetChecked is RollbackTargetIn that asks check of each candidate in turn, newest
// first, and goes past those it refuses (check returns why: the record no longer verifies, the
// artifact is gone), listing each in skipped as "name (why)"; a nil check refuses none.
func RollbackTargetChecked(preps []v1.Preparation, current, environment string, check func(*v1.Preparation) string) (_ *v1.Preparation, skipped []string, _ error) {
	if current == "" {
		return nil, nil, &Refusal{Message: "the Serving deploys no Preparation yet"}
	}
	at := -1
	for i := range preps {
		if preps[i].Name == current {
			at = i
		}
	}
	if at < 0 {
		return nil, nil, &Refusal{Message: fmt.Sprintf("its Preparation %s no longer exists, so what ran before it is unknown", current)}
	}
	for i := at + 1; i < len(preps); i++ {
		if rev := RevokedIn(&preps[i], environment); rev != nil {
			skipped = append(skipped, fmt.Sprintf("%s (its record in Environment %s is revoked: %s failed)", preps[i].Name, rev.Environment, rev.Verification))
			continue
		}
		for _, rec := range preps[i].Status.DeploymentRecords {
			if rec.Wave != "" || (environment != "" && rec.Environment != environment) {
				continue
			}
			if check != nil {
				if why := check(&preps[i]); why != "" {
					skipped = append(skipped, preps[i].Name+" ("+why+")")
					break
				}
			}
			return &preps[i], skipped, nil
		}
	}
	msg := fmt.Sprintf("no Preparation older than %s has a deployment record (none ran healthily before it)", current)
	if environment != "" {
		msg = fmt.Sprintf("no Preparation older than %s has a deployment record in Environment %s (none ran healthily there before it)", current, environment)
	}
	if len(skipped) > 0 {
		msg += "; passed over: " + text.Names(skipped)
	}
	return nil, skipped, &Refusal{Message: msg}
}

// RevokedIn returns the newest revocation of prep's records in Environment environment (in any
// when empty) its status lists, or nil. A revoked Preparation is no rollback target there.
func RevokedIn(prep *v1.Preparation, environment string) *v1.Revocation {
	for i := range prep.Status.Revocations { // newest first
		if r := &prep.Status.Revocations[i]; environment == "" || r.Environment == environment {
			return r
		}
	}
	return nil
}
