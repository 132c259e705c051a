package server

import (
	"fmt"
	"net/url"
	"sort"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
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
	Namespace   string           `json:"namespace"`
	Name        string           `json:"name"`
	Order       string           `json:"order"`
	Preparation string           `json:"preparation,omitempty"`
	Revision    string           `json:"revision,omitempty"`
	Clusters    v1.ClusterCounts `json:"clusters"`
	Ready       Condition        `json:"ready"`
}

// ClusterRow is one cluster of a Serving: what its Argo CD Application reports, or why Kokumi
// holds it.
type ClusterRow struct {
	Cluster     string `json:"cluster"`
	Application string `json:"application,omitempty"`
	// State is where the cluster's deployment stands, as the Serving counts it: Held,
	// Degraded, Progressing or Healthy. A held cluster keeps the health Argo CD last reported.
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

// ServingDetail is the Serving page: its counts and a table of its clusters.
type ServingDetail struct {
	ServingSummary
	Rows []ClusterRow `json:"rows"`
	// RowsOmitted counts the clusters past MaxRows.
	RowsOmitted int `json:"rowsOmitted,omitempty"`
	// Promotion is the Order's mode and its Preparations.
	Promotion *Promotion `json:"promotion,omitempty"`
	// Pipeline is how the stages the Order's Environment requires stand; absent when it
	// requires none.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// Records are the deployment records of the deployed Preparation; absent when it has none.
	Records *Records `json:"records,omitempty"`
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
// lists it.
type Deployment struct {
	Namespace   string     `json:"namespace"`
	Serving     string     `json:"serving"`
	Application string     `json:"application"`
	Link        string     `json:"link,omitempty"`
	Health      string     `json:"health,omitempty"`
	Sync        string     `json:"sync,omitempty"`
	Revision    string     `json:"revision,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
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
	Name     string    `json:"name"`
	Clusters int32     `json:"clusters"`
	Ready    Condition `json:"ready"`
	// Requires are the stages a release must pass before it deploys here.
	Requires []Requirement `json:"requires,omitempty"`
}

// Requirement is one stage an Environment requires: another Environment and its soak.
type Requirement struct {
	Environment string `json:"environment"`
	// Soak is how long the release must have run there, as people write it ("30m"); empty
	// when deployed healthily is enough.
	Soak string `json:"soak,omitempty"`
}

func requirementsOf(e *v1.Environment) []Requirement {
	var out []Requirement
	for _, r := range e.Spec.Requires {
		req := Requirement{Environment: r.Environment}
		if r.Soak != nil && r.Soak.Duration > 0 {
			req.Soak = promotion.Duration(r.Soak.Duration)
		}
		out = append(out, req)
	}
	return out
}

func readyOf(conds []metav1.Condition) Condition {
	c := apimeta.FindStatusCondition(conds, v1.ConditionReady)
	if c == nil {
		return Condition{Status: "Unknown"}
	}
	return Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
}

func summarizeServing(s *v1.Serving) ServingSummary {
	return ServingSummary{
		Namespace:   s.Namespace,
		Name:        s.Name,
		Order:       s.Spec.OrderRef.Name,
		Preparation: s.Spec.PreparationName,
		Revision:    s.Status.Revision,
		Clusters:    s.Status.Clusters,
		Ready:       readyOf(s.Status.Conditions),
	}
}

func summarizeCluster(c *v1.Cluster) ClusterSummary {
	return ClusterSummary{
		Name:    c.Name,
		Server:  c.Spec.Server,
		Version: c.Status.Version,
		Labels:  c.Labels,
		Ready:   readyOf(c.Status.Conditions),
	}
}

// appView is what the pages show of one Application.
type appView struct {
	name, health, sync, revision, message string
	since                                 *time.Time
}

func readApp(app *unstructured.Unstructured) appView {
	v := appView{name: app.GetName()}
	st, err := argocd.ReadStatus(app)
	if err != nil {
		v.message = err.Error()
		return v
	}
	v.health, v.sync, v.revision = st.Health.Status, st.Sync.Status, st.Sync.Revision
	if msg, refused := st.Refusal(); refused {
		v.message = msg
	} else if st.Health.Message != "" {
		v.message = st.Health.Message
	}
	if t, ok, _ := unstructured.NestedString(app.Object, "status", "health", "lastTransitionTime"); ok {
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
// labelled with the Serving) and its status. Other clients, such as the kubectl plugin, show
// the same table with it. argoBase, when set, links each row to Argo CD's UI.
func ServingDetailOf(s *v1.Serving, apps []unstructured.Unstructured, argoBase string) ServingDetail {
	d := ServingDetail{ServingSummary: summarizeServing(s)}
	d.Rows, d.RowsOmitted = servingRows(s, apps, argoBase)
	return d
}

// servingRows builds the Serving page's table: one row per Application the Serving owns, and
// one per cluster its status lists without one (held). Troubled clusters come first (held,
// degraded, then any other not healthy), then by name; past MaxRows they are counted.
func servingRows(s *v1.Serving, apps []unstructured.Unstructured, argoBase string) ([]ClusterRow, int) {
	byCluster := map[string]*ClusterRow{}
	for i := range apps {
		app := &apps[i]
		cluster := app.GetLabels()[argocd.LabelCluster]
		if cluster == "" {
			continue
		}
		v := readApp(app)
		byCluster[cluster] = &ClusterRow{
			Cluster: cluster, Application: v.name, Link: appLink(argoBase, app.GetNamespace(), v.name),
			Health: v.health, Sync: v.sync, Revision: v.revision, Since: v.since, Message: v.message,
		}
	}
	for _, t := range s.Status.Targets {
		row, ok := byCluster[t.Cluster]
		if !ok {
			row = &ClusterRow{Cluster: t.Cluster, Application: t.Application, Revision: t.Revision}
			byCluster[t.Cluster] = row
		}
		if len(t.Conditions) > 0 {
			row.State, row.Reason, row.Message = t.Conditions[0].Type, t.Conditions[0].Reason, t.Conditions[0].Message
		}
		if !t.Since.IsZero() && (row.Since == nil || row.Reason != "") {
			since := t.Since.Time
			row.Since = &since
		}
	}
	rows := make([]ClusterRow, 0, len(byCluster))
	for _, r := range byCluster {
		if r.State == "" {
			r.State = stateOf(r.Health, r.Sync)
		}
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if a, b := rowRank(rows[i]), rowRank(rows[j]); a != b {
			return a < b
		}
		return rows[i].Cluster < rows[j].Cluster
	})
	return capRows(rows)
}

// stateOf is the state of a cluster the Serving's status does not list: what Argo CD reports.
func stateOf(health, sync string) string {
	switch {
	case health == argocd.HealthHealthy && sync == argocd.SyncSynced:
		return fleet.Healthy.String()
	case health == argocd.HealthDegraded || health == "Missing":
		return fleet.Degraded.String()
	default:
		return fleet.Progressing.String()
	}
}

// rowRank orders rows by how much they need a look: held, degraded, progressing, healthy, in
// the order of fleet's states.
func rowRank(r ClusterRow) int {
	for _, st := range []fleet.State{fleet.Held, fleet.Degraded, fleet.Progressing, fleet.Healthy} {
		if r.State == st.String() {
			return int(st)
		}
	}
	return int(fleet.Progressing)
}

// clusterDeployments builds the Cluster page's Deployments tab from the Applications Kokumi
// keeps for that cluster, ordered by Serving.
func clusterDeployments(apps []unstructured.Unstructured, argoBase string) ([]Deployment, int) {
	out := make([]Deployment, 0, len(apps))
	for i := range apps {
		app := &apps[i]
		l := app.GetLabels()
		v := readApp(app)
		out = append(out, Deployment{
			Namespace: l[argocd.LabelServingNamespace], Serving: l[argocd.LabelServing],
			Application: v.name, Link: appLink(argoBase, app.GetNamespace(), v.name),
			Health: v.health, Sync: v.sync, Revision: v.revision, Since: v.since,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Serving < out[j].Serving
	})
	return capRows(out)
}

// capRows keeps the first MaxRows items and counts the rest.
func capRows[T any](rows []T) ([]T, int) {
	if len(rows) <= MaxRows {
		return rows, 0
	}
	return rows[:MaxRows], len(rows) - MaxRows
}
