package view

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// The fleet view: for one Environment (or several), a table of the clusters it selects (rows)
// by the Orders deployed there (columns, one per Serving), each cell the release the cluster
// runs for that Order and its state, as the Serving page decides it (applyTarget, holdNotReady,
// settle). The server and the kubectl plugin both build it here.

// StateWaiting is the one state of a fleet cell beyond fleet's: a cluster its Serving's
// roll-out has not reached yet (Progressing with reason Waiting: it runs what it ran).
const StateWaiting = "Waiting"

// FleetStates are the states a fleet cell may be in, most in need of a look first: the order of
// FleetPage.Counts and of the state filter.
var FleetStates = []string{
	fleet.Held.String(), fleet.Degraded.String(), fleet.Drifted.String(), StateWaiting, fleet.Progressing.String(), fleet.Healthy.String(),
}

// DefaultFleetLimit is how many rows a fleet page has when the query names no limit.
const DefaultFleetLimit = 100

// FleetServing is one Serving of a fleet view, with what its column needs: the Argo CD
// Applications Kokumi keeps for it and its Order's Preparations (to name the release each
// cluster runs).
type FleetServing struct {
	Serving      *v1.Serving
	Applications []argocd.Application
	Preparations []v1.Preparation
}

// FleetEnvironment is one Environment of a fleet view and the Servings of the Orders that
// deploy there.
type FleetEnvironment struct {
	Environment *v1.Environment
	Servings    []FleetServing
}

// FleetQuery filters and pages a fleet view.
type FleetQuery struct {
	// Selector keeps the clusters whose labels it matches (a label selector, such as
	// "region=eu,tier!=canary"); empty keeps every one.
	Selector string
	// Order keeps the columns of that Order ("name", or "namespace/name").
	Order string
	// State keeps the rows with at least one cell in that state (one of FleetStates).
	State string
	// After keeps the clusters whose name sorts after it: the cursor of the next page
	// (FleetPage.Next).
	After string
	// Limit is how many rows a page has: DefaultFleetLimit when zero, at most MaxRows.
	Limit int
}

// FleetQueryOf reads selector, order, state, after and limit of a request's query; an error says
// which is wrong and how to fix it.
func FleetQueryOf(v url.Values) (FleetQuery, error) {
	q := FleetQuery{Selector: v.Get("selector"), Order: v.Get("order"), State: v.Get("state"), After: v.Get("after")}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxRows {
			return q, fmt.Errorf("limit %q is not a whole number from 1 to %d", s, MaxRows)
		}
		q.Limit = n
	}
	return q, q.Check()
}

// Check says what of q is wrong, and how to fix it: its state, its selector or its limit.
func (q FleetQuery) Check() error {
	if q.State != "" && !slices.Contains(FleetStates, q.State) {
		return fmt.Errorf("state %q is not a state of the fleet view: use one of %s", q.State, strings.Join(FleetStates, ", "))
	}
	if q.Limit < 0 || q.Limit > MaxRows {
		return fmt.Errorf("limit %d is not a whole number from 1 to %d", q.Limit, MaxRows)
	}
	_, err := fleetSelector(q.Selector)
	return err
}

// fleetSelector parses a fleet query's label selector; its error says how to write one.
func fleetSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("selector %q does not parse: %v; write it as kubectl's -l takes it, such as region=eu,tier!=canary", s, err)
	}
	return sel, nil
}

// FleetColumn is one Order deployed to an Environment: its Serving and the release it deploys.
type FleetColumn struct {
	Namespace   string `json:"namespace"`
	Environment string `json:"environment"`
	// Order is the Order's name, and its Serving's.
	Order string `json:"order"`
	// Preparation is the release the Serving deploys (spec.preparationName); Revision its
	// artifact digest as the Serving's status says it.
	Preparation string `json:"preparation,omitempty"`
	Revision    string `json:"revision,omitempty"`
}

// FleetCell is what one cluster runs of one Order.
type FleetCell struct {
	// State is one of FleetStates.
	State string `json:"state"`
	// Reason and Message say why the cluster is held, waiting, drifted, degraded or progressing.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Preparation is the release the cluster runs (what Argo CD last synced there), when it is one
	// of the Order's Preparations; Revision its artifact digest.
	Preparation string `json:"preparation,omitempty"`
	Revision    string `json:"revision,omitempty"`
	// Created is when that Preparation was made: the release's age.
	Created *time.Time `json:"created,omitempty"`
	// Target is true when the cluster runs the release the Serving deploys.
	Target bool `json:"target"`
	// Since is when the cluster entered its state.
	Since *time.Time `json:"since,omitempty"`
}

// FleetRow is one cluster and its cells, one per column (null where the column's Environment
// does not select the cluster).
type FleetRow struct {
	Cluster string       `json:"cluster"`
	Ready   bool         `json:"ready"`
	Cells   []*FleetCell `json:"cells"`
}

// FleetPage is a page of the fleet view.
type FleetPage struct {
	// Environments are the Environments shown, as namespace/name.
	Environments []string      `json:"environments"`
	Columns      []FleetColumn `json:"columns"`
	Rows         []FleetRow    `json:"rows"`
	// Clusters counts the clusters the selector and Order keep; Counts their cells by state
	// (every state of FleetStates, zero included), before the state filter and paging.
	Clusters int            `json:"clusters"`
	Counts   map[string]int `json:"counts"`
	// RowsTotal counts the rows every filter keeps; RowsOmitted those of them past this page.
	RowsTotal   int `json:"rowsTotal"`
	RowsOmitted int `json:"rowsOmitted,omitempty"`
	// Next is the After of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// fleetColumn is what building a column's cells needs of its Serving.
type fleetColumn struct {
	serving *v1.Serving
	apps    map[string]*argocd.Application
	targets map[string]*v1.Target
	preps   map[string]*v1.Preparation // by artifact digest, without "sha256:"
	members map[string]bool            // the clusters of its Environment
}

// FleetOf builds the page q asks for of the fleet view of envs over clusters (every Cluster; the
// view keeps those the Environments select). Rows are ordered by cluster name; columns by
// namespace, Environment and Order. Its error says what of q is wrong.
func FleetOf(clusters []v1.Cluster, envs []FleetEnvironment, argoBase string, q FleetQuery) (FleetPage, error) {
	if err := q.Check(); err != nil {
		return FleetPage{}, err
	}
	sel, err := fleetSelector(q.Selector)
	if err != nil {
		return FleetPage{}, err
	}
	page := FleetPage{Environments: []string{}, Columns: []FleetColumn{}, Rows: []FleetRow{}, Counts: map[string]int{}}
	for _, st := range FleetStates {
		page.Counts[st] = 0
	}
	envs = slices.Clone(envs)
	sort.Slice(envs, func(i, j int) bool {
		a, b := envs[i].Environment, envs[j].Environment
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	selected := map[string]*v1.Cluster{}
	var cols []fleetColumn
	for _, e := range envs {
		page.Environments = append(page.Environments, e.Environment.Namespace+"/"+e.Environment.Name)
		envSel, err := cluster.Selector(&e.Environment.Spec.ClusterSelector)
		if err != nil {
			continue // the Environment's own condition says so; it selects nothing
		}
		members := map[string]bool{}
		for _, c := range cluster.Members(envSel, clusters) {
			members[c.Name] = true
			if sel.Matches(labels.Set(c.Labels)) {
				selected[c.Name] = c
			}
		}
		servings := slices.Clone(e.Servings)
		sort.Slice(servings, func(i, j int) bool { return servings[i].Serving.Name < servings[j].Serving.Name })
		for _, fs := range servings {
			sv := fs.Serving
			if q.Order != "" && q.Order != sv.Name && q.Order != sv.Namespace+"/"+sv.Name {
				continue
			}
			page.Columns = append(page.Columns, FleetColumn{
				Namespace: sv.Namespace, Environment: e.Environment.Name, Order: sv.Name,
				Preparation: sv.Spec.PreparationName, Revision: sv.Status.Revision,
			})
			cols = append(cols, newFleetColumn(fs, members))
		}
	}
	names := make([]string, 0, len(selected))
	for name := range selected {
		names = append(names, name)
	}
	sort.Strings(names)
	page.Clusters = len(names)
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultFleetLimit
	}
	limit = min(limit, MaxRows)
	for _, name := range names {
		c := selected[name]
		cells := make([]*FleetCell, len(cols))
		keep := q.State == ""
		for i := range cols {
			if cells[i] = cols[i].cell(c, argoBase); cells[i] != nil {
				page.Counts[cells[i].State]++
				keep = keep || cells[i].State == q.State
			}
		}
		if !keep {
			continue
		}
		page.RowsTotal++
		if name <= q.After && q.After != "" {
			continue
		}
		if len(page.Rows) == limit {
			page.RowsOmitted++
			continue
		}
		page.Rows = append(page.Rows, FleetRow{Cluster: name, Ready: cluster.IsReady(c), Cells: cells})
	}
	if page.RowsOmitted > 0 {
		page.Next = page.Rows[len(page.Rows)-1].Cluster
	}
	return page, nil
}

// newFleetColumn indexes a Serving's Applications, targets and Preparations by cluster and
// digest.
func newFleetColumn(fs FleetServing, members map[string]bool) fleetColumn {
	col := fleetColumn{
		serving: fs.Serving, members: members,
		apps:    make(map[string]*argocd.Application, len(fs.Applications)),
		targets: make(map[string]*v1.Target, len(fs.Serving.Status.Targets)),
		preps:   make(map[string]*v1.Preparation, len(fs.Preparations)),
	}
	for i := range fs.Applications {
		if name := fs.Applications[i].GetLabels()[argocd.LabelCluster]; name != "" {
			col.apps[name] = &fs.Applications[i]
		}
	}
	for i := range fs.Serving.Status.Targets {
		t := &fs.Serving.Status.Targets[i]
		col.targets[t.Cluster] = t
	}
	for i := range fs.Preparations {
		if d := fs.Preparations[i].Spec.Artifact.Digest; d != "" {
			col.preps[strings.TrimPrefix(d, "sha256:")] = &fs.Preparations[i]
		}
	}
	return col
}

// cell is what cluster c runs of the column's Order: nil when its Environment does not select c.
func (col *fleetColumn) cell(c *v1.Cluster, argoBase string) *FleetCell {
	if !col.members[c.Name] {
		return nil
	}
	sv := col.serving
	row := clusterRow(c, col.apps[c.Name], col.targets[c.Name], sv.Status.Revision, argoBase)
	cell := &FleetCell{State: row.State, Reason: row.Reason, Message: row.Message, Revision: row.Revision, Since: row.Since}
	if cell.State == fleet.Progressing.String() && cell.Reason == v1.ReasonWaiting {
		cell.State = StateWaiting
	}
	if !slices.Contains(FleetStates, cell.State) {
		cell.State = fleet.Progressing.String() // a state this view does not know yet
	}
	cell.Target = argocd.SameRevision(row.Revision, sv.Status.Revision)
	if p := col.preps[strings.TrimPrefix(row.Revision, "sha256:")]; p != nil {
		created := p.CreationTimestamp.Time
		cell.Preparation, cell.Created = p.Name, &created
	} else if cell.Target {
		cell.Preparation = sv.Spec.PreparationName
	}
	return cell
}
