// Package view builds what the UI and the kubectl plugin show of Kokumi's objects: summaries,
// the Serving page's cluster rows (their state as internal/fleet decides it), the Cluster page's
// deployments. It takes plain values and returns plain values; the server and the plugin both
// call it.
package view

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/promotion"
)

// MaxRows caps every table the API returns; the rest is counted in an omitted field.
const MaxRows = 1000

// Condition is the Ready condition of an object, as the UI shows it.
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ServingSummary is one row of the Servings table.
type ServingSummary struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Order       string `json:"order"`
	Preparation string `json:"preparation,omitempty"`
	Revision    string `json:"revision,omitempty"`
	// DeployedSince is when Revision became Deployed on every cluster, unbroken since: the
	// start of the soak of the stages after this Serving's Environment.
	DeployedSince *time.Time       `json:"deployedSince,omitempty"`
	Clusters      v1.ClusterCounts `json:"clusters"`
	Ready         Condition        `json:"ready"`
}

// OrderSummary is one row of the Orders table: an Order, its Ready condition (why it does not
// render, such as SourceNotFound) and its Serving when one exists. An Order that never renders has
// no Serving, and is seen here.
type OrderSummary struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Product     string `json:"product"`
	Environment string `json:"environment"`
	// Mode is the promotion mode, Manual unless the Order says Automatic.
	Mode              string `json:"mode"`
	LatestPreparation string `json:"latestPreparation,omitempty"`
	// Serving is the Order's Serving (it has the Order's name), empty while there is none.
	Serving string    `json:"serving,omitempty"`
	Ready   Condition `json:"ready"`
}

// SummarizeOrder is an Order's row of the Orders table; hasServing says whether its Serving
// exists.
func SummarizeOrder(o *v1.Order, hasServing bool) OrderSummary {
	out := OrderSummary{
		Namespace: o.Namespace, Name: o.Name, Product: o.Spec.ProductRef.Name, Environment: o.Spec.EnvironmentRef.Name,
		Mode: string(o.Spec.Promotion.Mode), LatestPreparation: o.Status.LatestPreparation, Ready: ReadyOf(o.Status.Conditions),
	}
	if out.Mode == "" {
		out.Mode = string(v1.PromotionManual) // the Order's default
	}
	if hasServing {
		out.Serving = o.Name
	}
	return out
}

// ClusterRow is one cluster of a Serving: what its Argo CD Application reports, or why Kokumi
// holds it.
type ClusterRow struct {
	Cluster     string `json:"cluster"`
	Application string `json:"application,omitempty"`
	// State is where the cluster's deployment stands, as the Serving counts it: Held,
	// Degraded, Drifted, Progressing or Healthy. A held cluster keeps the health Argo CD last reported.
	State string `json:"state"`
	// Link opens the Application in Argo CD's UI, when the server knows where that is.
	Link     string `json:"link,omitempty"`
	Health   string `json:"health,omitempty"`
	Sync     string `json:"sync,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Since is when the cluster entered its current health, or its held state.
	Since *time.Time `json:"since,omitempty"`
	// Reason and Message say why the cluster is held, degraded or out of step.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ServingDetail is the Serving page: its counts and a table of its clusters, or of the page of
// them a RowQuery asks for.
type ServingDetail struct {
	ServingSummary
	Rows []ClusterRow `json:"rows"`
	// RowsTotal counts the rows that match the query's filter, before paging; the counts of
	// ServingSummary.Clusters stay those of the whole Serving.
	RowsTotal int `json:"rowsTotal"`
	// RowsOmitted counts the matching rows past the page: RowsTotal - offset - len(Rows), when
	// that is positive.
	RowsOmitted int `json:"rowsOmitted,omitempty"`
	// Promotion is the Order's mode and its Preparations.
	Promotion *Promotion `json:"promotion,omitempty"`
	// Pipeline is how the stages the Order's Environment requires stand; absent when it
	// requires none.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// Records are the deployment records of the deployed Preparation; absent when it has none.
	Records *Records `json:"records,omitempty"`
	// Rollout is the roll-out in waves as the controller decided it (status.rollout): its state,
	// current wave and counts per wave; absent without a roll-out policy.
	Rollout *v1.RolloutStatus `json:"rollout,omitempty"`
	// Control is what people asked of the roll-out (spec.rollout): paused, the Preparation
	// whose roll-out to abort, and who asked last; absent when nobody asked anything.
	Control *v1.RolloutControl `json:"control,omitempty"`
	// Approval is the gate the roll-out waits at for people's approval (status.rollout.awaiting)
	// and who approved it so far; absent when none waits.
	Approval *Approval `json:"approval,omitempty"`
	// Can says what the person who asks may do here: "promote" (Promote and Roll back),
	// "rollout" (Pause, Resume and Abort), which patch the Serving, and "approve" (Approve the
	// gate of Approval), present while a gate waits.
	Can map[string]Can `json:"can,omitempty"`
}

// Approval is a gate of a roll-out that waits for approvals: what POST …/approve takes to
// approve it (Wave, Preparation), how many approvals it asks, and whose count so far.
type Approval struct {
	// Gate is status.rollout.awaiting: a wave, or "environment" for the Environment's gate.
	Gate string `json:"gate"`
	// Wave is the wave to approve; empty for the Environment's gate.
	Wave string `json:"wave,omitempty"`
	// Preparation is the Preparation whose roll-out waits.
	Preparation string `json:"preparation"`
	// Required is how many different people must approve.
	Required int `json:"required"`
	// Approvers are the people whose approvals count, in the order they approved.
	Approvers []string `json:"approvers"`
	// SeparateFromPromoter says that PromotedBy's approval does not count.
	SeparateFromPromoter bool `json:"separateFromPromoter,omitempty"`
	// PromotedBy is who promoted the Preparation (spec.promotedBy).
	PromotedBy string `json:"promotedBy,omitempty"`
}

// GateWave is the wave an approval names for a gate as status.rollout.awaiting names it: the
// Environment's gate ("environment", v1.EnvironmentGate) is the empty wave.
func GateWave(gate string) string {
	if gate == v1.EnvironmentGate {
		return ""
	}
	return gate
}

// ClusterSummary is one row of the Clusters table.
type ClusterSummary struct {
	Name    string            `json:"name"`
	Server  string            `json:"server"`
	Version string            `json:"version,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Ready   Condition         `json:"ready"`
}

// Deployment is one Serving that targets a cluster, as the Cluster page's Deployments tab
// lists it: the Serving, and the row its Serving page shows for the cluster (held, with the
// reason ClusterNotReady, while the Cluster is not Ready).
type Deployment struct {
	Namespace string `json:"namespace"`
	Serving   string `json:"serving"`
	ClusterRow
}

// ClusterDetail is the Cluster page.
type ClusterDetail struct {
	ClusterSummary
	Deployments []Deployment `json:"deployments"`
	// DeploymentsOmitted counts the Deployments past MaxRows.
	DeploymentsOmitted int `json:"deploymentsOmitted,omitempty"`
}

// EnvironmentSummary is one Environment of a namespace, as the Order form offers it.
type EnvironmentSummary struct {
	Name string `json:"name"`
	// Clusters counts the Clusters the Environment selects; ReadyClusters those of them that
	// are Ready.
	Clusters      int32     `json:"clusters"`
	ReadyClusters int32     `json:"readyClusters"`
	Ready         Condition `json:"ready"`
	// Requires are the stages a release must pass before it deploys here.
	Requires []Requirement `json:"requires,omitempty"`
	// Approvals is how many people's approvals its own gate (spec.approval) asks before a
	// release deploys here; 0 when it asks none.
	Approvals int `json:"approvals,omitempty"`
}

// Requirement is one stage an Environment requires: another Environment and its soak.
type Requirement struct {
	Environment string `json:"environment"`
	// Soak is how long the release must have run there, as people write it ("30m"); empty
	// when deployed healthily is enough.
	Soak string `json:"soak,omitempty"`
	// Match is what makes the same release there: Artifact or Release.
	Match string `json:"match"`
}

// RequirementsOf lists the stages an Environment requires, as its page shows them.
func RequirementsOf(e *v1.Environment) []Requirement {
	var out []Requirement
	for _, r := range e.Spec.Requires {
		req := Requirement{Environment: r.Environment, Match: string(r.Match)}
		if req.Match == "" {
			req.Match = string(v1.MatchArtifact)
		}
		if r.Soak != nil && r.Soak.Duration > 0 {
			req.Soak = promotion.Duration(r.Soak.Duration)
		}
		out = append(out, req)
	}
	return out
}

// RequiresSentence says the stages e requires (RequirementsOf), as a roll-out plan says them:
// "Environment edge requires staging: soak 30s, match Release (…)"; empty when it requires none.
func RequiresSentence(e *v1.Environment) string {
	reqs := RequirementsOf(e)
	if len(reqs) == 0 {
		return ""
	}
	parts := make([]string, 0, len(reqs))
	for _, r := range reqs {
		part := r.Environment + ": "
		if r.Soak != "" {
			part += "soak " + r.Soak + ", "
		}
		parts = append(parts, part+"match "+r.Match)
	}
	return "Environment " + e.Name + " requires " + strings.Join(parts, "; ") + " (the stages a Preparation passes before it deploys here)"
}

// ReadyOf is the Ready condition of conds as the pages show it: Unknown when there is none.
func ReadyOf(conds []metav1.Condition) Condition {
	c := apimeta.FindStatusCondition(conds, v1.ConditionReady)
	if c == nil {
		return Condition{Status: "Unknown"}
	}
	return Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
}

// SummarizeServing is a Serving's row of the Servings table.
func SummarizeServing(s *v1.Serving) ServingSummary {
	out := ServingSummary{
		Namespace:   s.Namespace,
		Name:        s.Name,
		Order:       s.Spec.OrderRef.Name,
		Preparation: s.Spec.PreparationName,
		Revision:    s.Status.Revision,
		Clusters:    s.Status.Clusters,
		Ready:       ReadyOf(s.Status.Conditions),
	}
	if since, ok := s.Status.DeployedAt(s.Status.Revision); ok {
		out.DeployedSince = &since
	}
	return out
}

// SummarizeCluster is a Cluster's row of the Clusters table.
func SummarizeCluster(c *v1.Cluster) ClusterSummary {
	return ClusterSummary{
		Name:    c.Name,
		Server:  c.Spec.Server,
		Version: c.Status.Version,
		Labels:  c.Labels,
		Ready:   ReadyOf(c.Status.Conditions),
	}
}

// appView is what the pages show of one Application.
type appView struct {
	name, health, sync, revision, message string
	since                                 *time.Time
}

func readApp(app *argocd.Application) appView {
	v := appView{name: app.Name}
	st := app.Status
	v.health, v.sync, v.revision = st.Health.Status, st.Sync.Status, st.Sync.Revision
	if msg, refused := st.Refusal(); refused {
		v.message = fleet.TenantMessage(msg)
	} else if st.Health.Message != "" {
		v.message = fleet.TenantMessage(st.Health.Message)
	}
	if t := st.Health.LastTransitionTime; t != "" {
		if parsed, err := time.Parse(time.RFC3339, t); err == nil {
			v.since = &parsed
		}
	}
	return v
}

// appLink returns the address of an Application in Argo CD's UI, or "" when base is unset.
func appLink(base, namespace, name string) string {
	if base == "" || name == "" {
		return ""
	}
	return fmt.Sprintf("%s/applications/%s/%s", base, url.PathEscape(namespace), url.PathEscape(name))
}

// ServingDetailOf is what the Serving page shows of a Serving without its Order: its summary
// and its table of clusters, built from the Argo CD Applications Kokumi keeps for it (those
// labelled with the Serving) and its status, capped at MaxRows. Other clients, such as the
// kubectl plugin, show the same table with it. argoBase, when set, links each row to Argo CD's
// UI.
func ServingDetailOf(s *v1.Serving, apps []argocd.Application, argoBase string) ServingDetail {
	return ServingDetailPage(s, apps, argoBase, RowQuery{})
}

// ServingDetailPage is ServingDetailOf with the rows q asks for.
func ServingDetailPage(s *v1.Serving, apps []argocd.Application, argoBase string, q RowQuery) ServingDetail {
	d := ServingDetail{ServingSummary: SummarizeServing(s), Rollout: s.Status.Rollout, Control: s.Spec.Rollout}
	d.Rows, d.RowsTotal, d.RowsOmitted = q.page(ServingRows(s, apps, argoBase))
	return d
}

// RowQuery filters and pages the Serving page's table of clusters.
type RowQuery struct {
	// Q keeps the clusters whose name contains it, whatever the case.
	Q string
	// State keeps the rows in that state: Held, Degraded, Drifted, Progressing or Healthy.
	State string
	// Offset skips that many matching rows; Limit keeps at most that many after them (zero
	// means MaxRows, and no more than MaxRows are kept).
	Offset, Limit int
}

// RowQueryOf reads q, state, offset and limit of a request's query; an error says which is wrong.
func RowQueryOf(v url.Values) (RowQuery, error) {
	q := RowQuery{Q: v.Get("q"), State: v.Get("state")}
	if q.State != "" && !slices.ContainsFunc(fleet.States, func(st fleet.State) bool { return st.String() == q.State }) {
		return q, fmt.Errorf("state %q is not a state of a row: use Held, Degraded, Drifted, Progressing or Healthy", q.State)
	}
	number := func(name string, least int) (int, error) {
		s := v.Get(name)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < least {
			return 0, fmt.Errorf("%s %q is not a whole number of at least %d", name, s, least)
		}
		return n, nil
	}
	var err error
	if q.Offset, err = number("offset", 0); err != nil {
		return q, err
	}
	if q.Limit, err = number("limit", 1); err != nil {
		return q, err
	}
	return q, nil
}

// page keeps the rows that match q's filter, and of them the page q asks for; it returns how
// many match and how many of those are past the page.
func (q RowQuery) page(rows []ClusterRow) (kept []ClusterRow, total, omitted int) {
	if q.Q != "" || q.State != "" {
		needle := strings.ToLower(q.Q)
		matching := rows[:0:0]
		for _, r := range rows {
			if (q.State == "" || r.State == q.State) && strings.Contains(strings.ToLower(r.Cluster), needle) {
				matching = append(matching, r)
			}
		}
		rows = matching
	}
	total = len(rows)
	limit := q.Limit
	if limit <= 0 || limit > MaxRows {
		limit = MaxRows
	}
	start := min(max(q.Offset, 0), total)
	end := min(start+limit, total)
	return rows[start:end], total, total - end
}

// ServingRows builds the Serving page's table: one row per Application the Serving owns, and
// one per cluster its status lists without one (held). Troubled clusters come first (held,
// degraded, then any other not healthy), then by name.
func ServingRows(s *v1.Serving, apps []argocd.Application, argoBase string) []ClusterRow {
	byCluster := map[string]*ClusterRow{}
	appOf := map[string]*argocd.Application{}
	for i := range apps {
		app := &apps[i]
		cluster := app.GetLabels()[argocd.LabelCluster]
		if cluster == "" {
			continue
		}
		row := appRow(app, cluster, argoBase)
		byCluster[cluster], appOf[cluster] = &row, app
	}
	for _, t := range s.Status.Targets {
		row, ok := byCluster[t.Cluster]
		if !ok {
			row = &ClusterRow{Cluster: t.Cluster, Application: t.Application, Revision: t.Revision}
			byCluster[t.Cluster] = row
		}
		applyTarget(row, t)
	}
	rows := make([]ClusterRow, 0, len(byCluster))
	for cluster, r := range byCluster {
		settle(r, appOf[cluster], s.Status.Revision)
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if a, b := rowRank(rows[i]), rowRank(rows[j]); a != b {
			return a < b
		}
		return rows[i].Cluster < rows[j].Cluster
	})
	return rows
}

// appRow is the row of a cluster as its Application reports it.
func appRow(app *argocd.Application, cluster, argoBase string) ClusterRow {
	v := readApp(app)
	return ClusterRow{
		Cluster: cluster, Application: v.name, Link: appLink(argoBase, app.GetNamespace(), v.name),
		Health: v.health, Sync: v.sync, Revision: v.revision, Since: v.since, Message: v.message,
	}
}

// applyTarget sets what the Serving's status says of the row's cluster: its state, why, and
// since when.
func applyTarget(row *ClusterRow, t v1.Target) {
	if len(t.Conditions) > 0 {
		row.State, row.Reason, row.Message = t.Conditions[0].Type, t.Conditions[0].Reason, t.Conditions[0].Message
	}
	if !t.Since.IsZero() && (row.Since == nil || row.Reason != "") {
		since := t.Since.Time
		row.Since = &since
	}
}

// holdNotReady holds the row of a cluster whose Cluster is not Ready, as the Serving
// reconciler does (fleet.Decide): Argo CD's last health and sync stay beside the reason.
func holdNotReady(row *ClusterRow, c *v1.Cluster) {
	row.State, row.Reason, row.Message = fleet.Held.String(), v1.ReasonClusterNotReady, fleet.NotReadyMessage(cluster.Fleet(c))
	if cond := apimeta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); cond != nil {
		since := cond.LastTransitionTime.Time
		row.Since = &since
	}
}

// settle gives a row the Serving's status says nothing of the state fleet.Observe decides from
// what Argo CD reports of its Application (app, nil when there is none) at revision, the
// Serving's (or, when unknown, the revision the Application syncs): the page shows the state the
// Serving reconciler would fold.
func settle(row *ClusterRow, app *argocd.Application, revision string) {
	if row.State != "" {
		return
	}
	if app == nil {
		row.State = fleet.Progressing.String()
		return
	}
	if revision == "" {
		revision = app.Status.Sync.Revision
	}
	state, _, _ := fleet.Observe(app.Status, revision)
	row.State = state.String()
}

// rowRank orders rows by how much they need a look: held, degraded, drifted, progressing,
// healthy, in the order of fleet's states.
func rowRank(r ClusterRow) int {
	for _, st := range fleet.States {
		if r.State == st.String() {
			return int(st)
		}
	}
	return int(fleet.Progressing)
}

// clusterRow is the row of Cluster c for a Serving whose status says target of it (nil: nothing)
// and deploys revision: from c's Application (nil when there is none), held while c is not
// Ready, and otherwise in the state fleet.Observe decides (settle). The Cluster page and the
// fleet view build their cells with it.
func clusterRow(c *v1.Cluster, app *argocd.Application, target *v1.Target, revision, argoBase string) ClusterRow {
	row := ClusterRow{Cluster: c.Name}
	if app != nil {
		row = appRow(app, c.Name, argoBase)
	} else if target != nil {
		row.Application, row.Revision = target.Application, target.Revision
	}
	if target != nil {
		applyTarget(&row, *target)
	}
	if !cluster.IsReady(c) {
		holdNotReady(&row, c)
	}
	settle(&row, app, revision)
	return row
}

// ClusterDeployments builds the Cluster page's Deployments tab from the Applications Kokumi
// keeps for the Cluster c, ordered by Serving: each row as the Serving page shows the cluster,
// from the Application and what the Serving's status (of servings, by namespace/name) says of
// it, and held while c is not Ready.
func ClusterDeployments(c *v1.Cluster, apps []argocd.Application, servings map[string]*v1.Serving, argoBase string) ([]Deployment, int) {
	out := make([]Deployment, 0, len(apps))
	for i := range apps {
		app := &apps[i]
		l := app.GetLabels()
		d := Deployment{Namespace: l[argocd.LabelServingNamespace], Serving: l[argocd.LabelServing]}
		var target *v1.Target
		revision := ""
		if sv := servings[d.Namespace+"/"+d.Serving]; sv != nil {
			for j := range sv.Status.Targets {
				if sv.Status.Targets[j].Cluster == c.Name {
					target = &sv.Status.Targets[j]
				}
			}
			revision = sv.Status.Revision
		}
		d.ClusterRow = clusterRow(c, app, target, revision, argoBase)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Serving < out[j].Serving
	})
	return CapRows(out)
}

// CapRows keeps the first MaxRows items and counts the rest.
func CapRows[T any](rows []T) ([]T, int) {
	if len(rows) <= MaxRows {
		return rows, 0
	}
	return rows[:MaxRows], len(rows) - MaxRows
}
