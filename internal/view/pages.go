package view

import (
	"time"
)

// Pipeline is how the stages the Order's Environment requires stand for one of its
// Preparations, as the Serving reconciler decides them.
type Pipeline struct {
	// Environment is the Order's Environment.
	Environment string `json:"environment"`
	// Preparation is the Preparation the stages are checked for: the one the Serving waits
	// to deploy, else the Order's newest Ready one, else the one it deploys. Empty when the
	// Order has none.
	Preparation string `json:"preparation,omitempty"`
	// Allowed is true when every stage passed.
	Allowed bool `json:"allowed"`
	// Message says why not (or, with no Preparation, what the stages wait for).
	Message string `json:"message,omitempty"`
	// Stages are the required stages, in the order the Environment lists them.
	Stages []Stage `json:"stages"`
	// Error says why the stages could not be checked.
	Error string `json:"error,omitempty"`
}

// Stage is one required stage.
type Stage struct {
	// Environment is the required Environment.
	Environment string `json:"environment"`
	// State is Passed, Soaking or Waiting.
	State string `json:"state"`
	// Message says how it stands, such as "staging soaking 12m of 30m (same chart and images)".
	Message string `json:"message,omitempty"`
	// Match is what makes the same release there, as the gate compared it: Artifact or Release.
	Match string `json:"match,omitempty"`
	// Soak is the stage's soak ("30m").
	Soak string `json:"soak,omitempty"`
	// Left is the soak time left while Soaking; LeftSeconds is the same in seconds, for the
	// page's countdown between fetches.
	Left        string `json:"left,omitempty"`
	LeftSeconds int64  `json:"leftSeconds,omitempty"`
	// Order is the Order whose run decided the stage; Serving is its Serving when it exists.
	Order   string `json:"order,omitempty"`
	Serving string `json:"serving,omitempty"`
	// Record is the digest of the verified record that is the evidence, if any.
	Record string `json:"record,omitempty"`
}

// Records are the deployment records attached to the artifact of the Preparation a Serving
// deploys, read from the registry and verified with the trusted public keys.
type Records struct {
	// Preparation is the deployed Preparation.
	Preparation string `json:"preparation"`
	// Artifact is its artifact, <registry>/<repository>@sha256:<digest>.
	Artifact string `json:"artifact"`
	// Verify is the cosign command that verifies the records with the public key.
	Verify string `json:"verify"`
	// Items are the records, newest first.
	Items []RecordRow `json:"items"`
	// ItemsOmitted counts the records past view.MaxRows.
	ItemsOmitted int `json:"itemsOmitted,omitempty"`
	// Error says why the records could not be read; Items then list what the Preparation's
	// status says, unverified.
	Error string `json:"error,omitempty"`
}

// RecordRow is one deployment record.
type RecordRow struct {
	// Digest is the digest of the record's signed envelope.
	Digest      string `json:"digest"`
	Environment string `json:"environment,omitempty"`
	Order       string `json:"order,omitempty"`
	// Clusters counts the clusters that ran the Preparation healthily.
	Clusters int        `json:"clusters"`
	Time     *time.Time `json:"time,omitempty"`
	// KeyID is the key that verified it, or the one the status names.
	KeyID string `json:"keyID,omitempty"`
	// Verified is true when a trusted key signed it and it is a Kokumi record of the artifact;
	// Problem says why not.
	Verified bool   `json:"verified"`
	Problem  string `json:"problem,omitempty"`
}

// Promotion is what the Serving page shows of its Order's promotion: the mode, and the Order's
// Preparations a person may promote.
type Promotion struct {
	// Mode is the Order's promotion mode; only Manual lets a person promote.
	Mode         string               `json:"mode"`
	Preparations []PreparationSummary `json:"preparations"`
	// PreparationsOmitted counts the older Preparations past MaxPreparations.
	PreparationsOmitted int `json:"preparationsOmitted,omitempty"`
	// Environment is the Order's Environment: where a promotion deploys.
	Environment string `json:"environment,omitempty"`
	// Current is the Preparation most of the Serving's clusters run (Runs.Current): what a diff
	// compares with; empty when none runs one of the Order's Preparations.
	Current string `json:"current,omitempty"`
	// RollbackTo is the Preparation a rollback without "to" deploys (promotion.RollbackTarget):
	// the newest one older than the deployed one with a deployment record; empty when none.
	RollbackTo string `json:"rollbackTo"`
}

// DeploymentSummary is one deployment record a Preparation's status lists: where it ran
// healthily, on how many clusters, when.
type DeploymentSummary struct {
	Environment string    `json:"environment"`
	Clusters    int32     `json:"clusters"`
	Time        time.Time `json:"time"`
}

// PreparationSummary is one Preparation of an Order.
type PreparationSummary struct {
	Name            string    `json:"name"`
	Created         time.Time `json:"created"`
	Digest          string    `json:"digest"`
	TargetNamespace string    `json:"targetNamespace"`
	Ready           Condition `json:"ready"`
	// Promoted is true for the Preparation the Serving is pointed at (spec.preparationName),
	// whether or not a cluster runs it yet.
	Promoted bool `json:"promoted,omitempty"`
	// Running counts the clusters that run it (Runs.Clusters).
	Running int32 `json:"running,omitempty"`
	// Label says how it stands in what runs (Runs.Label): "runs on 2 clusters", "promoted,
	// awaiting approval"; empty when neither.
	Label string `json:"label,omitempty"`
	// Blocked says why a promotion of it would be refused, as the server already decided it
	// (the stages of the Order's Environment, Pipeline); empty when nothing refuses it yet.
	Blocked string `json:"blocked,omitempty"`
	// Deployments are the deployment records of its status, newest first, at most
	// MaxDeployments: the history of where it was deployed, and when.
	Deployments []DeploymentSummary `json:"deployments"`
	// Custody says how its inputs were verified and who signed its provenance (Custody).
	Custody string `json:"custody"`
}

// Can says whether the person who asks may do an action, as RBAC answers it
// (SubjectAccessReview), and why not: the UI disables what would be refused, and says why.
type Can struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
}
