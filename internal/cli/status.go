package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// Status is what `status` prints with -o json or -o yaml: the Serving page's summary and
// cluster table.
type Status struct {
	view.ServingSummary
	// Rows are the clusters, as the UI's table lists them.
	Rows []view.ClusterRow `json:"rows"`
	// RowsOmitted counts the clusters past the table's cap.
	RowsOmitted int `json:"rowsOmitted,omitempty"`
	// TargetsOmitted counts the clusters not healthy that the Serving's status left out.
	TargetsOmitted int32 `json:"targetsOmitted,omitempty"`
	// ApplicationsError says why Argo CD's Applications could not be read: the table then
	// lists only the clusters the Serving's status names.
	ApplicationsError string `json:"applicationsError,omitempty"`
	// Rollout is the roll-out in waves, as the controller decided it (status.rollout).
	Rollout *v1.RolloutStatus `json:"rollout,omitempty"`
}

func newStatusCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status SERVING",
		Short: "Show a Serving: its Preparation, cluster counts and the clusters that need a look",
		Long: `Show a Serving as the UI's Serving page does: the Preparation it deploys, the
revision, how many clusters are selected, healthy, progressing, degraded and held,
its Ready condition, and a table of its clusters (held first, then degraded, then
progressing, then healthy) with the reason and message of each.

The table is built from Argo CD's Applications of the Serving (in --argocd-namespace)
and the Serving's status. If you may not read the Applications, it lists only the
clusters the Serving's status names, and says so. The exit code is 0 whatever the
Serving's state.`,
		Example: `  # The Serving web of namespace shop
  kubectl kokumi status web -n shop

  # With each cluster's Argo CD Application, revision and since when
  kubectl kokumi status web -n shop -o wide

  # For scripts
  kubectl kokumi status web -n shop -o json`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "", "wide", "json", "yaml"); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			st, err := o.status(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			return printStatus(o.streams.Out, st, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json or yaml")
	return cmd
}

// status reads the Serving and its Applications.
func (o *options) status(ctx context.Context, c client.Client, ns, name string) (*Status, error) {
	sv, err := getServing(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	apps, appsErr := o.applications(ctx, c, sv)
	d := view.ServingDetailOf(sv, apps, "")
	st := &Status{ServingSummary: d.ServingSummary, Rows: d.Rows, RowsOmitted: d.RowsOmitted, TargetsOmitted: sv.Status.TargetsOmitted, Rollout: d.Rollout}
	if appsErr != nil {
		st.ApplicationsError = appsErr.Error()
	}
	return st, nil
}

// applications lists the Argo CD Applications Kokumi keeps for the Serving; an error says why
// they could not be read, and the table goes on without them.
func (o *options) applications(ctx context.Context, c client.Client, sv *v1.Serving) ([]argocd.Application, error) {
	list := &argocd.ApplicationList{}
	err := c.List(ctx, list, client.InNamespace(o.argoCDNamespace), client.MatchingLabels{
		argocd.LabelServing: sv.Name, argocd.LabelServingNamespace: sv.Namespace,
	})
	switch {
	case err == nil:
		return list.Items, nil
	case apimeta.IsNoMatchError(err):
		return nil, fmt.Errorf("argo CD's Application kind is not installed on this cluster")
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("you may not list Applications in %s: the table of clusters needs `list applications.argoproj.io` in namespace %s (ask an admin of %s for it)",
			o.argoCDNamespace, o.argoCDNamespace, o.argoCDNamespace)
	}
	return nil, fmt.Errorf("list Argo CD's Applications in namespace %s: %w", o.argoCDNamespace, err)
}

func printStatus(out io.Writer, st *Status, output string, now time.Time) error {
	if done, err := printStructured(out, st, output); done {
		return err
	}
	w := &errWriter{w: out}
	prep := st.Preparation
	if prep == "" {
		prep = "<none>: nothing is promoted yet"
	}
	w.printf("Serving:      %s/%s\n", st.Namespace, st.Name)
	w.printf("Order:        %s\n", st.Order)
	w.printf("Preparation:  %s\n", prep)
	w.printf("Revision:     %s\n", orNone(st.Revision))
	ready := st.Ready.Status
	if st.Ready.Reason != "" {
		ready += " (" + st.Ready.Reason + ")"
	}
	if st.Ready.Message != "" {
		ready += ": " + oneLine(st.Ready.Message)
	}
	w.printf("Ready:        %s\n", ready)
	cc := st.Clusters
	drifted := ""
	if cc.Drifted > 0 {
		drifted = fmt.Sprintf(", Drifted %d", cc.Drifted)
	}
	w.printf("Clusters:     Selected %d, Healthy %d, Progressing %d, Degraded %d, Held %d%s\n", cc.Selected, cc.Healthy, cc.Progressing, cc.Degraded, cc.Held, drifted)
	if r := st.Rollout; r != nil {
		line := fmt.Sprintf("%s %s", r.State, r.Preparation)
		if r.Wave != "" {
			line += ", current wave " + r.Wave
		}
		if r.By != "" {
			line += ", by " + r.By
		}
		if r.RollbackTo != "" {
			line += ", went back to " + r.RollbackTo
		}
		if r.Awaiting != "" {
			line += fmt.Sprintf(", awaiting approval of %s (%s approve %s -n %s)", rollout.GateName(view.GateWave(r.Awaiting)), DisplayName, st.Name, st.Namespace)
		}
		w.printf("Roll-out:     %s\n", line)
		for _, wave := range r.Waves {
			w.printf("  wave %-12s %d clusters: %d healthy, %d progressing, %d failed, %d waiting\n", wave.Name, wave.Selected, wave.Healthy, wave.Progressing, wave.Failed, wave.Waiting)
		}
		for _, v := range r.Verifications {
			w.printf("  verification %s of %s (%s): %s, %d passes in a row, %d failed of %d runs: %s\n",
				v.Name, rollout.GateName(v.Wave), v.Kind, v.Phase, v.Passes, v.Failures, v.Runs, oneLine(v.Message))
		}
	}
	if w.err != nil {
		return w.err
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	if st.ApplicationsError != "" {
		// Without the Applications the table has only the clusters the Serving's status
		// names: those not healthy. Say so, whether it names any or not.
		w.printf("%s.\n", sentence(st.ApplicationsError))
		if len(st.Rows) == 0 {
			w.printf("Without the Applications the table can list only the clusters the Serving's status names (those not healthy), and it names none.\n")
			return w.err
		}
		w.printf("The table below lists only the clusters the Serving's status names (those not healthy).\n\n")
		if w.err != nil {
			return w.err
		}
	}
	if len(st.Rows) == 0 {
		w.printf("%s\n", noClusters(st))
		return w.err
	}
	tw := printers.GetNewTabWriter(out)
	wide := output == "wide"
	header := "CLUSTER\tSTATE\tREASON\tMESSAGE"
	if wide {
		header = "CLUSTER\tSTATE\tREASON\tAPPLICATION\tHEALTH\tSYNC\tREVISION\tSINCE\tMESSAGE"
	}
	tw2 := &errWriter{w: tw}
	tw2.printf("%s\n", header)
	for _, r := range st.Rows {
		if wide {
			since := "-"
			if r.Since != nil {
				since = duration.HumanDuration(now.Sub(*r.Since))
			}
			tw2.printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.State, orDash(r.Reason), orDash(r.Application), orDash(r.Health), orDash(r.Sync),
				orDash(shortDigest(r.Revision)), since, orDash(oneLine(r.Message)))
			continue
		}
		tw2.printf("%s\t%s\t%s\t%s\n", r.Cluster, r.State, orDash(r.Reason), orDash(oneLine(r.Message)))
	}
	if tw2.err != nil {
		return tw2.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	w = &errWriter{w: out}
	if st.RowsOmitted > 0 {
		w.printf("… and %d more clusters\n", st.RowsOmitted)
	}
	if st.TargetsOmitted > 0 && st.ApplicationsError != "" {
		w.printf("… and %d more clusters not healthy the Serving's status leaves out\n", st.TargetsOmitted)
	}
	return w.err
}

// noClusters says why a table of clusters read from Argo CD's Applications is empty.
func noClusters(st *Status) string {
	switch {
	case st.Clusters.Selected == 0:
		return "No clusters to show: the Environment of Order " + st.Order + " selects none (its spec.clusterSelector matches no Cluster: see kubectl get kclusters --show-labels)."
	case st.Preparation == "":
		return "No clusters to show: nothing is promoted yet, so Kokumi has written no Argo CD Application."
	}
	return "No clusters to show yet: Kokumi has not written the Serving's Argo CD Applications (see its Ready condition above)."
}

// sentence is s with its first letter upper case.
func sentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// shortDigest is the first 12 hex digits of a sha256 digest; anything else is returned as it is.
func shortDigest(d string) string {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) <= 12 {
		return d
	}
	return hex[:12]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// printStructured writes v as JSON or YAML when output asks for one, and reports whether it did.
func printStructured(out io.Writer, v any, output string) (bool, error) {
	switch output {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, fmt.Errorf("write JSON: %w", err)
		}
		_, err = fmt.Fprintln(out, string(data))
		return true, err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("write YAML: %w", err)
		}
		_, err = out.Write(data)
		return true, err
	}
	return false, nil
}
