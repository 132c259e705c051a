package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// Fleet is what `fleet` prints with -o json or -o yaml: the page of the fleet view the UI
// shows, and why Argo CD's Applications could not be read, when they could not.
type Fleet struct {
	view.FleetPage
	// ApplicationsError says why Argo CD's Applications could not be read: the cells then say
	// only what the Servings' status says of each cluster.
	ApplicationsError string `json:"applicationsError,omitempty"`
}

func newFleetCommand(o *options) *cobra.Command {
	var (
		output string
		q      view.FleetQuery
	)
	cmd := &cobra.Command{
		Use:   "fleet ENVIRONMENT",
		Short: "Show which release of each Order every cluster of an Environment runs, and how it stands",
		Long: `Show the fleet view of an Environment, as the UI's Fleet page does: one row per
cluster the Environment selects (by name), one column per Order deployed there (its
Serving), and in each cell the cluster's state and the release (Preparation) it runs,
with the release's age.

The states, most in need of a look first:
  Held         Kokumi holds the cluster (not Ready, or Argo CD refuses the Application)
  Degraded     Argo CD reports it Degraded, or its sync failed
  Drifted      it no longer runs what was deployed
  Waiting      its wave of the roll-out has not started: it runs what it ran
  Progressing  on its way to the Serving's release
  Healthy      runs the Serving's release healthily
A release marked * is not the one the Serving deploys.

The view reads the Environment, the Clusters, and the Servings, Orders and Preparations of
the namespace, and Argo CD's Applications (in --argocd-namespace). Pages hold --limit
clusters; the last line says how to ask for the next one.`,
		Example: `  # The fleet of the Environment prod of namespace shop
  kubectl kokumi fleet prod -n shop

  # Only the clusters in eu that drifted, of the Order web
  kubectl kokumi fleet prod -n shop -l region=eu --order web --state Drifted

  # The next page, and everything for scripts
  kubectl kokumi fleet prod -n shop --after cluster-0099
  kubectl kokumi fleet prod -n shop -o json`,
		Args: exactArgs("environment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			if err := q.Check(); err != nil {
				return fmt.Errorf("%w (see --help)", err)
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			f, err := o.fleet(cmd.Context(), c, ns, args[0], q)
			if err != nil {
				return err
			}
			return printFleet(o.streams.Out, f, q.State, output, time.Now())
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "output format: json or yaml")
	fl.StringVarP(&q.Selector, "selector", "l", "", "keep the clusters whose labels match this selector, such as region=eu,tier!=canary")
	fl.StringVar(&q.Order, "order", "", "keep the column of this Order")
	fl.StringVar(&q.State, "state", "", "keep the clusters with a cell in this state: "+strings.Join(view.FleetStates, ", "))
	fl.StringVar(&q.After, "after", "", "start after this cluster: the next page")
	fl.IntVar(&q.Limit, "limit", view.DefaultFleetLimit, fmt.Sprintf("clusters a page shows, at most %d", view.MaxRows))
	return cmd
}

// fleet reads what the fleet view of the Environment ns/name needs, as the kubeconfig's user,
// and builds the page q asks for.
func (o *options) fleet(ctx context.Context, c client.Client, ns, name string, q view.FleetQuery) (*Fleet, error) {
	var env v1.Environment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &env); err != nil {
		return nil, explain(kindEnvironment, "get", ns, name, err)
	}
	var clusters v1.ClusterList
	if err := c.List(ctx, &clusters); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("you may not list Clusters: the fleet view needs `list clusters.delivery.kokumi.dev` (cluster-wide) to know which clusters Environment %s selects; ask an admin for it, or read the fleet in Kokumi's UI (its Fleet page)", name)
		}
		return nil, fmt.Errorf("list Clusters: %w", err)
	}
	var orders v1.OrderList
	if err := c.List(ctx, &orders, client.InNamespace(ns)); err != nil {
		return nil, explain(kindOrder, "list", ns, "*", err)
	}
	var servings v1.ServingList
	if err := c.List(ctx, &servings, client.InNamespace(ns)); err != nil {
		return nil, explain(kindServing, "list", ns, "*", err)
	}
	var preps v1.PreparationList
	if err := c.List(ctx, &preps, client.InNamespace(ns)); err != nil {
		return nil, explain(kindPreparation, "list", ns, "*", err)
	}
	environmentOf := map[string]string{}
	for _, ord := range orders.Items {
		environmentOf[ord.Name] = ord.Spec.EnvironmentRef.Name
	}
	f := &Fleet{}
	fe := view.FleetEnvironment{Environment: &env}
	for i := range servings.Items {
		sv := &servings.Items[i]
		if environmentOf[sv.Spec.OrderRef.Name] != name {
			continue
		}
		var apps []argocd.Application
		if f.ApplicationsError == "" {
			var err error
			if apps, err = o.applications(ctx, c, sv); err != nil {
				f.ApplicationsError = err.Error()
			}
		}
		fe.Servings = append(fe.Servings, view.FleetServing{Serving: sv, Applications: apps, Preparations: promotion.OrderPreparations(preps.Items, sv.Spec.OrderRef.Name)})
	}
	page, err := view.FleetOf(clusters.Items, []view.FleetEnvironment{fe}, "", q)
	if err != nil {
		return nil, fmt.Errorf("%w (see --help)", err)
	}
	f.FleetPage = page
	return f, nil
}

func printFleet(out io.Writer, f *Fleet, state, output string, now time.Time) error {
	if done, err := printStructured(out, f, output); done {
		return err
	}
	w := &errWriter{w: out}
	if f.ApplicationsError != "" {
		w.printf("%s: the cells say only what the Servings' status says of each cluster.\n\n", sentence(f.ApplicationsError))
	}
	env := strings.Join(f.Environments, ", ")
	switch {
	case len(f.Columns) == 0:
		w.printf("No Order deploys to Environment %s yet: create an Order whose spec.environmentRef names it.\n", env)
		return w.err
	case f.Clusters == 0:
		w.printf("Environment %s selects no cluster (with this --selector): see its spec.clusterSelector and the Clusters' labels (kubectl get clusters --show-labels).\n", env)
		return w.err
	}
	var counts []string
	for _, st := range view.FleetStates {
		counts = append(counts, fmt.Sprintf("%s %d", st, f.Counts[st]))
	}
	w.printf("Environment %s: %d clusters, %d Orders. Cells: %s\n\n", env, f.Clusters, len(f.Columns), strings.Join(counts, ", "))
	if w.err != nil {
		return w.err
	}
	if len(f.Rows) == 0 {
		w.printf("No cluster has a cell in state %s: leave out --state to see them all.\n", state)
		return w.err
	}
	tw := printers.GetNewTabWriter(out)
	t := &errWriter{w: tw}
	header := []string{"CLUSTER"}
	for _, col := range f.Columns {
		header = append(header, strings.ToUpper(col.Order))
	}
	t.printf("%s\n", strings.Join(header, "\t"))
	for _, r := range f.Rows {
		line := []string{r.Cluster}
		for _, cell := range r.Cells {
			line = append(line, fleetCell(cell, now))
		}
		t.printf("%s\n", strings.Join(line, "\t"))
	}
	if t.err != nil {
		return t.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.Next != "" {
		w.printf("\nShowing %d of %d clusters: add --after %s for the next page.\n", len(f.Rows), f.RowsTotal, f.Next)
	}
	return w.err
}

// fleetCell says a cell as the table shows it: "Healthy web-2 (3d)"; a release marked * is not
// the Serving's.
func fleetCell(c *view.FleetCell, now time.Time) string {
	if c == nil {
		return "-"
	}
	s := c.State
	if c.Preparation != "" {
		s += " " + c.Preparation
		if !c.Target {
			s += "*"
		}
		if c.Created != nil {
			s += " (" + duration.HumanDuration(now.Sub(*c.Created)) + ")"
		}
	}
	return s
}
