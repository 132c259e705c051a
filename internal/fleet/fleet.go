package fleet

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// State is the state of one cluster's deployment.
type State int

// States, in the order status.targets lists them.
const (
	Held State = iota
	Degraded
	// Drifted: Argo CD deployed the release there and has reported it OutOfSync since, for
	// longer than the drift threshold (ApplyDrift).
	Drifted
	Progressing
	Healthy
)

// States are the states in the order status.targets lists them and the views rank them: the
// clusters that most need a look first.
var States = []State{Held, Degraded, Drifted, Progressing, Healthy}

// String returns the state's name as status.targets shows it.
func (s State) String() string {
	return [...]string{"Held", "Degraded", "Drifted", "Progressing", "Healthy"}[s]
}

// Cluster is what the fleet knows of one selected Cluster.
type Cluster struct {
	// Name of the Cluster.
	Name string
	// Server is its API server URL.
	Server string
	// Ready is its Ready condition; NotReadyMessage says why not.
	Ready           bool
	NotReadyMessage string
}

// Observed is an Application that exists under a planned name.
type Observed struct {
	// Ours is true when it belongs to the Serving; any other is never touched.
	Ours bool
	// UpToDate is true when it carries everything the plan would write.
	UpToDate bool
	// Status is what Argo CD reports in it.
	Status argocd.Status
}

// Request is everything Decide needs of one Serving.
type Request struct {
	// ServingNamespace and ServingName name the Serving (and its Order); ServingUID is its UID,
	// which every Application carries.
	ServingNamespace, ServingName string
	ServingUID                    types.UID
	// ArgoCDNamespace is where the Applications live.
	ArgoCDNamespace string
	// Preparation is the deployed Preparation's name.
	Preparation string
	// RepoURL and Revision are the artifact: oci://registry/repository and its digest.
	RepoURL, Revision string
	// TargetNamespace is where it deploys on every cluster.
	TargetNamespace string
	// ImagesInBundledRegistry is true when only the cluster Kokumi runs in reaches its images.
	ImagesInBundledRegistry bool
	// Project is the Environment's AppProject.
	Project argocd.Project
	// Clusters are the Clusters the Environment selects.
	Clusters []Cluster
	// Applications are the Applications that exist under the planned names.
	Applications map[string]Observed
	// Wanted holds, by cluster, the Application spec already computed for it (Spec) when the
	// caller compared it with what exists; Decide computes the others. Nil: all.
	Wanted map[string]argocd.ApplicationSpec
	// Retry is the syncPolicy.retry of every Application.
	Retry argocd.SyncRetry
	// Waiting holds, by cluster, why a roll-out in waves leaves its Application as it is
	// (internal/rollout): such a cluster is Progressing with reason Waiting, and nothing is
	// written for it. Nil: none.
	Waiting map[string]string
}

// Spec is the Application the request plans for cluster c.
func (req Request) Spec(c Cluster) argocd.ApplicationSpec {
	name := ApplicationName(req.ServingNamespace, req.ServingName, c.Name)
	return argocd.ApplicationSpec{
		Name: name, Namespace: req.ArgoCDNamespace,
		ServingNamespace: req.ServingNamespace, ServingName: req.ServingName, ServingUID: req.ServingUID, Cluster: c.Name,
		Project: req.Project.Name, RepoURL: req.RepoURL, Revision: req.Revision,
		Server: c.Server, TargetNamespace: req.TargetNamespace, Retry: req.Retry,
	}
}

// Decision is what happens on one cluster and what state it is in.
type Decision struct {
	// Cluster and Application name the cluster and its Application.
	Cluster, Application string
	// State, Reason and Message say how the cluster stands.
	State           State
	Reason, Message string
	// Revision is what Argo CD last synced there.
	Revision string
	// Write creates or updates the Application to Spec.
	Write bool
	// Remove deletes Kokumi's Application for the cluster, if there is one; what runs stays.
	Remove bool
	// Spec is the Application the cluster should have.
	Spec argocd.ApplicationSpec
}

// Decide returns one Decision per selected Cluster, by Cluster name.
func Decide(req Request) []Decision {
	clusters := append([]Cluster(nil), req.Clusters...)
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })
	owners := ServerOwners(clusters)
	out := make([]Decision, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, req.decide(c, owners[c.Name]))
	}
	return out
}

// Revise decides again, in decisions (Decide's, of an earlier req), the clusters named in
// clusters, for req: those whose Waiting or Wanted changed since. The others stay as decided.
func Revise(req Request, decisions []Decision, clusters map[string]bool) {
	if len(clusters) == 0 {
		return
	}
	sorted := append([]Cluster(nil), req.Clusters...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	owners := ServerOwners(sorted)
	byName := make(map[string]Cluster, len(clusters))
	for _, c := range req.Clusters {
		if clusters[c.Name] {
			byName[c.Name] = c
		}
	}
	for i := range decisions {
		if c, ok := byName[decisions[i].Cluster]; ok {
			decisions[i] = req.decide(c, owners[c.Name])
		}
	}
}

// decide is the Decision of cluster c, whose server owner (ServerOwners) is owner.
func (req Request) decide(c Cluster, owner string) Decision {
	name := ApplicationName(req.ServingNamespace, req.ServingName, c.Name)
	spec, ok := req.Wanted[c.Name]
	if !ok {
		spec = req.Spec(c)
	}
	d := Decision{Cluster: c.Name, Application: name, Spec: spec}
	app, exists := req.Applications[name]
	if exists {
		d.Revision = app.Status.Sync.Revision
	}
	switch {
	case owner != c.Name:
		d.hold(v1.ReasonClusterConflict, fmt.Sprintf(
			"Cluster %s connects to the same server %s as Cluster %s, which sorts first by name: Argo CD keeps one identity per server, so only %s deploys there. Delete one of the two Clusters, or fix the spec.server of the one that names the wrong server.",
			c.Name, c.Server, owner, owner))
		d.Remove = true
	case exists && !app.Ours:
		d.NotOurs(req.ArgoCDNamespace)
	case !c.Ready:
		// The Application stays exactly as it is until the Cluster is Ready again.
		d.hold(v1.ReasonClusterNotReady, NotReadyMessage(c))
	case req.ImagesInBundledRegistry && c.Server != v1.InClusterServer:
		d.hold(v1.ReasonRegistryUnreachable, "the images of Preparation "+req.Preparation+" are vendored into the bundled registry, which only the cluster Kokumi runs in reaches. Pin images where they are published, or vendor them into a registry every cluster reaches.")
		d.Remove = true
	case !req.Project.PermitsDestination(c.Server, c.Name, req.TargetNamespace):
		d.hold(v1.ReasonRejected, argocd.DestinationRefusal(c.Server, req.TargetNamespace, req.Project.Name))
		d.Remove = true
	case req.Waiting[c.Name] != "":
		d.State, d.Reason, d.Message = Progressing, v1.ReasonWaiting, req.Waiting[c.Name]
	default:
		d.Write = !exists || !app.UpToDate
		d.deployed(app, exists, req.Revision)
	}
	return d
}

// NotReadyMessage is the message of a cluster held because its Cluster is not Ready
// (ClusterNotReady): the one wording every view of it uses.
func NotReadyMessage(c Cluster) string {
	msg := "Cluster " + c.Name + " is not Ready"
	if c.NotReadyMessage != "" {
		msg += ": " + c.NotReadyMessage
	}
	return msg
}

// NotOurs holds the cluster because an Application of the name Kokumi would write exists and
// is not this Serving's: Kokumi leaves it alone and writes nothing.
func (d *Decision) NotOurs(argoCDNamespace string) {
	d.Write = false
	d.hold(v1.ReasonOptInRequired, fmt.Sprintf("Application %s/%s exists and is not Kokumi's, so Kokumi leaves it alone. Delete it, or rename it, to let this Serving deploy here.", argoCDNamespace, d.Application))
}

// WriteResult is what became of one decision's write or delete: Err is its error (nil when it
// went through, or was left for the next slice); NotOurs is true when an Application of that
// name exists and is someone else's.
type WriteResult struct {
	Err     error
	NotOurs bool
}

// AfterWrites returns the decisions as the writes left them, for ApplyDeadline and Fold: a
// cluster whose Application turned out to be someone else's is held (OptInRequired, nothing
// written), one whose write failed is Progressing (ApplicationWriteFailed) with the error, to be
// retried. decisions itself is not changed: the plan stays what was decided before any write.
func AfterWrites(decisions []Decision, results []WriteResult, argoCDNamespace string) []Decision {
	out := slices.Clone(decisions)
	for i, res := range results {
		d := &out[i]
		switch {
		case res.NotOurs:
			d.NotOurs(argoCDNamespace)
		case res.Err != nil && d.Write:
			d.State, d.Reason = Progressing, v1.ReasonApplicationWriteFailed
			d.Message = "could not write Application " + d.Application + ", retrying: " + res.Err.Error()
		}
	}
	return out
}

func (d *Decision) hold(reason, message string) {
	d.State, d.Reason, d.Message = Held, reason, message
}

// deployed sets the state of a cluster Kokumi deploys to from what Argo CD reports.
func (d *Decision) deployed(app Observed, exists bool, revision string) {
	st := app.Status
	switch {
	case !exists:
		d.State, d.Reason, d.Message = Progressing, v1.ReasonProgressing, "creating Application"
	case d.Write:
		d.State, d.Reason, d.Message = Progressing, v1.ReasonProgressing, "updating Application to "+short(revision)
	default:
		d.State, d.Reason, d.Message = Observe(st, revision)
	}
}

// Observe is the state of a cluster whose Application is as Kokumi wants it, from what Argo CD
// reports of it for revision: Held when Argo CD refuses it, Degraded when its sync failed, Argo
// CD cannot load it or it is Degraded at revision, Healthy when synced and healthy at revision,
// else Progressing, with reason OutOfSync when it is drifting (Drifting: ApplyDrift makes it
// Drifted past the drift threshold) and SelfHealing while Argo CD syncs it again. The Serving's
// fold and the UI's rows both take a cluster's state from here.
// The message is what a tenant reads of Argo CD's (TenantMessage).
func Observe(st argocd.Status, revision string) (state State, reason, message string) {
	state, reason, message = observe(st, revision)
	return state, reason, TenantMessage(message)
}

func observe(st argocd.Status, revision string) (state State, reason, message string) {
	if msg, refused := st.Refusal(); refused {
		return Held, v1.ReasonRejected, msg
	}
	if msg, failed := st.SyncFailure(revision); failed {
		return Degraded, v1.ReasonDegraded, "sync failed: " + msg
	}
	if msg, failed := st.Error(); failed {
		// Argo CD cannot even load or sync the target state: waiting would wait for nothing.
		return Degraded, v1.ReasonArgoCDError, "Argo CD reports " + msg
	}
	switch {
	case st.HealthyAt(revision):
		return Healthy, "", ""
	case st.Health.Status == argocd.HealthDegraded && argocd.SameRevision(st.Sync.Revision, revision):
		msg := "Argo CD reports the Application Degraded"
		if st.Health.Message != "" {
			msg += ": " + st.Health.Message
		}
		return Degraded, v1.ReasonDegraded, msg
	case Drifting(st, revision):
		return Progressing, v1.ReasonOutOfSync, driftMessage(st, revision)
	case SelfHealing(st, revision):
		return Progressing, v1.ReasonSelfHealing, "syncing again: " + driftMessage(st, revision)
	default:
		msg := fmt.Sprintf("sync %s, health %s", orUnknown(st.Sync.Status), orUnknown(st.Health.Status))
		if st.Sync.Revision != "" {
			msg += " at " + short(st.Sync.Revision)
		}
		if c := st.FirstCondition(); c != "" {
			msg += "; " + c
		}
		return Progressing, v1.ReasonProgressing, msg
	}
}

// Drifting reports whether Argo CD, having deployed revision (its last deployment, the newest
// entry of status.history or the last sync operation, was of revision), now reports what runs
// there changed: OutOfSync at revision with no sync operation running, or Synced at another
// revision. A first roll-out not synced yet is not drifting (Argo CD has not deployed revision),
// nor is a cluster Argo CD is syncing (SelfHealing). Kokumi's Applications self-heal, so a drift
// that lasts is one self-heal does not undo, such as another controller changing the objects
// back after each sync.
func Drifting(st argocd.Status, revision string) bool {
	return changed(st, revision) && !st.OperationRunning()
}

// SelfHealing reports whether Argo CD, having deployed revision, reports what runs there changed
// (as Drifting) and is syncing it again: not drift by itself, but it does not end a drift either
// (ApplyDrift).
func SelfHealing(st argocd.Status, revision string) bool {
	return changed(st, revision) && st.OperationRunning()
}

// changed reports whether Argo CD's last deployment was of revision and it now reports the
// cluster OutOfSync at revision, or Synced at another revision.
func changed(st argocd.Status, revision string) bool {
	if !st.DeployedAt(revision) {
		return false
	}
	switch st.Sync.Status {
	case argocd.SyncOutOfSync:
		return argocd.SameRevision(st.Sync.Revision, revision)
	case argocd.SyncSynced:
		return st.Sync.Revision != "" && !argocd.SameRevision(st.Sync.Revision, revision)
	}
	return false
}

// driftMessage says how a drifting cluster (Drifting) differs from what was deployed: the
// objects Argo CD reports OutOfSync, at most argocd.MaxOutOfSyncNames of them.
func driftMessage(st argocd.Status, revision string) string {
	if st.Sync.Status == argocd.SyncSynced {
		return fmt.Sprintf("Argo CD deployed %s and now reports %s synced", short(revision), short(st.Sync.Revision))
	}
	msg := "Argo CD deployed " + short(revision) + " and now reports it OutOfSync"
	if o := st.OutOfSync; o != nil && o.Count > 0 {
		names := strings.Join(o.Names, ", ")
		if more := o.Count - len(o.Names); more > 0 {
			names += " … and " + text.Thousands(more) + " more"
		}
		msg += ": " + names
	}
	return msg
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// short returns a digest's first 12 hex characters.
func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

// Leaving returns the names of the Serving's existing Applications whose clusters the
// Environment no longer selects: their clusters left.
func Leaving(servingNamespace, servingName string, clusters []Cluster, existing []string) []string {
	kept := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		kept[ApplicationName(servingNamespace, servingName, c.Name)] = true
	}
	var out []string
	for _, name := range existing {
		if !kept[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ApplyDeadline fails the clusters that have been Progressing longer than deadline, by the
// times previous (the last status's targets) says they entered that state, as a Deployment's
// progressDeadlineSeconds does: they become Degraded with ProgressDeadlineExceeded until they
// progress again. A drifting cluster (reason OutOfSync) is not progressing: ApplyDrift times it.
// It returns how long until the next of the others reaches the deadline (0 when none is
// Progressing, or deadline is 0).
func ApplyDeadline(decisions []Decision, previous []v1.Target, now metav1.Time, deadline time.Duration) time.Duration {
	if deadline <= 0 {
		return 0
	}
	progressing := func(d *Decision) bool {
		// A cluster a roll-out leaves waiting is not updating, nor is one drifting or self-healing.
		return d.State == Progressing && d.Reason != v1.ReasonWaiting && d.Reason != v1.ReasonOutOfSync && d.Reason != v1.ReasonSelfHealing
	}
	return applyLimit(decisions, previous, now, deadline, progressing, v1.ReasonProgressing, v1.ReasonProgressDeadlineExceeded, func(d *Decision) {
		d.State, d.Reason = Degraded, v1.ReasonProgressDeadlineExceeded
		d.Message = fmt.Sprintf("still not synced and healthy after the progress deadline of %s: %s", deadline, d.Message)
	})
}

// ApplyDrift makes Drifted the clusters that have been drifting (Progressing with reason
// OutOfSync, Drifting) for longer than after, timed as ApplyDeadline times the progress
// deadline: by the times previous (the last status's targets, and those past their cap the
// controller remembers) says they started. A cluster Argo CD syncs again (SelfHealing) goes on
// drifting, or stays Drifted, when previous shows it so: self-heal's attempts, every few seconds
// while another controller changes the objects back, neither end a drift nor restart its clock.
// A drifted cluster stays Drifted until Argo CD reports it otherwise. It returns how long until
// the next of the others drifts (0 when none is drifting).
func ApplyDrift(decisions []Decision, previous []v1.Target, now metav1.Time, after time.Duration) time.Duration {
	var was map[string]string
	for i := range decisions {
		d := &decisions[i]
		if d.State != Progressing || d.Reason != v1.ReasonSelfHealing {
			continue
		}
		if was == nil {
			was = make(map[string]string, len(previous))
			for _, t := range previous {
				if len(t.Conditions) > 0 {
					was[t.Cluster] = t.Conditions[0].Reason
				}
			}
		}
		if r := was[d.Cluster]; r == v1.ReasonOutOfSync || r == v1.ReasonDrifted {
			d.Reason = v1.ReasonOutOfSync
		}
	}
	drifting := func(d *Decision) bool { return d.State == Progressing && d.Reason == v1.ReasonOutOfSync }
	return applyLimit(decisions, previous, now, after, drifting, v1.ReasonOutOfSync, v1.ReasonDrifted, func(d *Decision) {
		d.State, d.Reason = Drifted, v1.ReasonDrifted
		d.Message = fmt.Sprintf("drifted: out of sync for longer than the drift threshold of %s, which self-heal did not undo: %s", after, d.Message)
	})
}

// ApplyTimes applies the progress deadline (ApplyDeadline) and the drift threshold (ApplyDrift)
// to the decisions, and returns how long until the next cluster reaches either (0: none).
func ApplyTimes(decisions []Decision, previous []v1.Target, now metav1.Time, deadline, driftAfter time.Duration) time.Duration {
	next := ApplyDeadline(decisions, previous, now, deadline)
	if drift := ApplyDrift(decisions, previous, now, driftAfter); drift > 0 && (next == 0 || drift < next) {
		next = drift
	}
	return next
}

// applyLimit applies exceed to the decisions in a state (in) that previous says they entered
// (its reason running) limit or longer before now, or that previous already shows past the
// limit (its reason reached). It returns how long until the next of the others reaches the
// limit (0 when none is in the state).
func applyLimit(decisions []Decision, previous []v1.Target, now metav1.Time, limit time.Duration,
	in func(*Decision) bool, running, reached string, exceed func(*Decision)) time.Duration {
	since := make(map[string]v1.Target, len(previous))
	for _, t := range previous {
		since[t.Cluster] = t
	}
	var next time.Duration
	for i := range decisions {
		d := &decisions[i]
		if !in(d) {
			continue
		}
		elapsed := time.Duration(0)
		if p, ok := since[d.Cluster]; ok && len(p.Conditions) > 0 {
			switch p.Conditions[0].Reason {
			case reached:
				elapsed = limit
			case running:
				elapsed = now.Sub(p.Since.Time)
			}
		}
		if elapsed >= limit {
			exceed(d)
			continue
		}
		if left := limit - elapsed; next == 0 || left < next {
			next = left
		}
	}
	return next
}

// Summary is the Serving status a fleet of Decisions folds into.
type Summary struct {
	Clusters v1.ClusterCounts
	// Targets are the non-healthy clusters, held, degraded, drifted, progressing, by name; at
	// most v1.MaxTargets.
	Targets []v1.Target
	// Omitted counts the non-healthy clusters the cap left out.
	Omitted int32
	// Unlisted are the non-healthy clusters the cap left out of Targets, each with the time it
	// entered its state as previous said (the caller remembers them: ApplyDeadline reaches them).
	Unlisted []v1.Target
	// Running counts every cluster by the revision Argo CD last synced there, most-run first,
	// at most v1.MaxRunning; RunningOmitted counts the revisions left out.
	Running        []v1.RevisionCount
	RunningOmitted int32
	// Ready is the Serving's Ready condition (without times and generation).
	Ready metav1.Condition
	// HealthyClusters names the clusters that run the Preparation synced and healthy, by name:
	// never a drifted one.
	HealthyClusters []string
	// DriftedClusters names the drifted clusters, by name.
	DriftedClusters []string
}

// Fold folds the Decisions into counts, the capped list of targets and the Ready condition.
// previous carries the targets of the last status, so that a cluster keeps the time it entered
// its state; now stamps the others.
func Fold(preparation, environment string, decisions []Decision, previous []v1.Target, now metav1.Time) Summary {
	var s Summary
	s.Clusters.Selected = int32(len(decisions))
	var healthy, notReady, failing, drifted, progressing []string
	ordered := make([]*Decision, 0, len(decisions))
	for i := range decisions {
		d := &decisions[i]
		switch d.State {
		case Healthy:
			s.Clusters.Healthy++
			healthy = append(healthy, d.Cluster)
			continue
		case Held:
			s.Clusters.Held++
			if d.Reason == v1.ReasonClusterNotReady {
				notReady = append(notReady, d.Cluster)
			} else {
				failing = append(failing, d.Cluster+" ("+d.Reason+")")
			}
		case Degraded:
			s.Clusters.Degraded++
			failing = append(failing, d.Cluster+" ("+d.Reason+")")
		case Drifted:
			s.Clusters.Drifted++
			drifted = append(drifted, d.Cluster)
		case Progressing:
			s.Clusters.Progressing++
			progressing = append(progressing, d.Cluster)
		}
		ordered = append(ordered, d)
	}
	sort.SliceStable(ordered, func(i, j int) bool {
		if ordered[i].State != ordered[j].State {
			return ordered[i].State < ordered[j].State
		}
		return ordered[i].Cluster < ordered[j].Cluster
	})
	since := make(map[string]v1.Target, len(previous))
	for _, t := range previous {
		since[t.Cluster] = t
	}
	for i, d := range ordered {
		t := v1.Target{
			Cluster: d.Cluster, Application: d.Application, Revision: d.Revision,
			Conditions: []v1.TargetCondition{{Type: d.State.String(), Reason: d.Reason}},
			Since:      now,
		}
		if p, ok := since[d.Cluster]; ok && len(p.Conditions) > 0 && p.Conditions[0].Reason == d.Reason && p.Conditions[0].Type == t.Conditions[0].Type {
			t.Since = p.Since
		}
		if i >= v1.MaxTargets {
			// Past the cap: remembered with its time, without its message.
			s.Unlisted = append(s.Unlisted, t)
			continue
		}
		t.Conditions[0].Message = text.Truncate(d.Message, 1024)
		s.Targets = append(s.Targets, t)
	}
	s.Omitted = int32(len(s.Unlisted))
	s.Running, s.RunningOmitted = running(decisions)
	s.Ready = readyCondition(preparation, environment, len(decisions), healthy, notReady, failing, drifted, progressing)
	s.HealthyClusters, s.DriftedClusters = healthy, drifted
	return s
}

// running counts the decisions by the revision Argo CD last synced on each cluster, most-run
// first, then by revision; at most v1.MaxRunning, and how many revisions were left out.
func running(decisions []Decision) ([]v1.RevisionCount, int32) {
	counts := map[string]int32{}
	for i := range decisions {
		if r := decisions[i].Revision; r != "" {
			counts[r]++
		}
	}
	if len(counts) == 0 {
		return nil, 0
	}
	out := make([]v1.RevisionCount, 0, len(counts))
	for r, n := range counts {
		out = append(out, v1.RevisionCount{Revision: r, Clusters: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Clusters != out[j].Clusters {
			return out[i].Clusters > out[j].Clusters
		}
		return out[i].Revision < out[j].Revision
	})
	if len(out) > v1.MaxRunning {
		return out[:v1.MaxRunning], int32(len(out) - v1.MaxRunning)
	}
	return out, 0
}

func readyCondition(preparation, environment string, selected int, healthy, notReady, failing, drifted, progressing []string) metav1.Condition {
	c := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse}
	notReadyPart := ""
	if len(notReady) > 0 {
		notReadyPart = "; not ready: " + text.Names(notReady)
	}
	driftedPart := ""
	if len(drifted) > 0 {
		driftedPart = "; drifted on " + text.Names(drifted)
	}
	switch {
	case len(notReady) == selected:
		c.Reason = v1.ReasonDeploymentFailed
		c.Message = fmt.Sprintf("No Cluster of Environment %s is Ready: %s", environment, text.Names(notReady))
	case len(failing) > 0:
		c.Reason = v1.ReasonDeploymentFailed
		c.Message = fmt.Sprintf("Preparation %s failed on %s", preparation, text.Names(failing))
		c.Message += driftedPart
		if len(healthy) > 0 {
			c.Message += "; healthy on " + text.Names(healthy)
		}
		c.Message += notReadyPart
	case len(drifted) > 0:
		c.Reason = v1.ReasonDrifted
		c.Message = fmt.Sprintf("Preparation %s drifted on %s: what runs there is no longer what Argo CD deployed", preparation, text.Names(drifted))
		if len(healthy) > 0 {
			c.Message += "; healthy on " + text.Names(healthy)
		}
		if len(progressing) > 0 {
			c.Message += "; waiting for " + text.Names(progressing)
		}
		c.Message += notReadyPart
	case len(progressing) == 0 && len(healthy) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1.ReasonDeployed
		c.Message = fmt.Sprintf("Deployed Preparation %s to %s%s", preparation, text.Names(healthy), notReadyPart)
	default:
		c.Reason = v1.ReasonProgressing
		c.Message = fmt.Sprintf("Deploying Preparation %s: healthy on %d of %d Ready clusters; waiting for %s%s",
			preparation, len(healthy), selected-len(notReady), text.Names(progressing), notReadyPart)
	}
	return c
}
