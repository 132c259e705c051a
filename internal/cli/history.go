package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// maxRecordsShown is how many deployment records a row of the table names.
const maxRecordsShown = 3

// HistoryEntry is one Preparation of an Order, as `history` prints it with -o json or -o yaml.
type HistoryEntry struct {
	// Name is the Preparation's name.
	Name string `json:"name"`
	// Created is when it was created.
	Created time.Time `json:"created"`
	// Digest is the artifact's digest.
	Digest string `json:"digest"`
	// Ready is the Preparation's Ready condition.
	Ready view.Condition `json:"ready"`
	// SourceVersion is the version of the Product's source it was rendered from.
	SourceVersion string `json:"sourceVersion,omitempty"`
	// Images counts its images.
	Images int `json:"images"`
	// Running is true for a Preparation some cluster of the Serving runs (view.Runs), Clusters
	// counts them.
	Running  bool  `json:"running"`
	Clusters int32 `json:"clusters,omitempty"`
	// Promoted is the state of the Preparation the Serving is pointed at (view.Runs'
	// PromotedState: deployed, rolling out, awaiting approval, paused, aborted, halted, rolled
	// back); empty for the others.
	Promoted string `json:"promoted,omitempty"`
	// Deployments are its deployment records, newest first.
	Deployments []v1.DeploymentRecord `json:"deployments,omitempty"`
	// Provenance points at its signed provenance and says how its inputs were verified;
	// absent when it has none.
	Provenance *v1.PreparationProvenance `json:"provenance,omitempty"`
	// Custody says the same in a line (view.Custody).
	Custody string `json:"custody"`
}

func newHistoryCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history ORDER",
		Short: "List the Preparations of an Order, newest first, and where they ran",
		Long: `List the Preparations an Order has rendered, newest first: when each was created,
its artifact's digest, whether it is Ready, the source version it was rendered from,
how many images it pins, whether the Serving (of the Order's name) runs it now, its
deployment records (in which Environment it ran healthily, on how many clusters, when), and
its custody: whether its source and images were verified, by which keys, and which key
signed its provenance.`,
		Example: `  # The Preparations of the Order web of namespace shop
  kubectl kokumi history web -n shop

  # Every deployment record, for scripts
  kubectl kokumi history web -n shop -o json`,
		Args: exactArgs("order"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			order, err := getOrder(ctx, c, ns, args[0])
			if err != nil {
				return err
			}
			var sv v1.Serving
			err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: order.Name}, &sv)
			if err != nil && !apierrors.IsNotFound(err) {
				// A missing Serving runs nothing; any other failure is worth knowing.
				return explain(kindServing, "get", ns, order.Name, err)
			}
			preps, err := preparationsOf(ctx, c, ns, order.Name)
			if err != nil {
				return err
			}
			runs := view.RunsOf(&sv, preps)
			entries := make([]HistoryEntry, 0, len(preps))
			for i := range preps {
				p := &preps[i]
				entries = append(entries, HistoryEntry{
					Name: p.Name, Created: p.CreationTimestamp.UTC(), Digest: p.Spec.Artifact.Digest,
					Ready: readyCondition(p.Status.Conditions), SourceVersion: p.Spec.Source.Version,
					Images: len(p.Spec.Images), Running: runs.Clusters[p.Name] > 0, Clusters: runs.Clusters[p.Name], Deployments: p.Status.DeploymentRecords,
					Provenance: p.Spec.Provenance, Custody: view.Custody(p.Spec.Provenance),
				})
				if p.Name == runs.Promoted {
					entries[len(entries)-1].Promoted = runs.PromotedState
				}
			}
			return printHistory(o.streams.Out, ns, order.Name, entries, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	return cmd
}

func printHistory(out io.Writer, ns, order string, entries []HistoryEntry, output string) error {
	if done, err := printStructured(out, entries, output); done {
		return err
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintf(out, "Order %s/%s has no Preparation yet: see kubectl describe order %s -n %s\n", ns, order, order, ns)
		return err
	}
	tw := printers.GetNewTabWriter(out)
	w := &errWriter{w: tw}
	w.printf("NAME\tCREATED\tDIGEST\tREADY\tVERSION\tIMAGES\tRUNNING\tPROMOTED\tDEPLOYED\tCUSTODY\n")
	for _, e := range entries {
		running := "-"
		if e.Running {
			running = fmt.Sprintf("%d clusters", e.Clusters)
			if e.Clusters == 1 {
				running = "1 cluster"
			}
		}
		w.printf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Name, e.Created.UTC().Format(timeFormat), orDash(shortDigest(e.Digest)),
			e.Ready.Status, orDash(e.SourceVersion), e.Images, running, orDash(e.Promoted), deployments(e.Deployments), e.Custody)
	}
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

// timeFormat is how the tables print a time: in UTC, and saying so.
const timeFormat = "2006-01-02 15:04:05 UTC"

// deployments names the newest deployment records: "prod 3 clusters 2026-01-02 15:04:05 UTC".
func deployments(records []v1.DeploymentRecord) string {
	if len(records) == 0 {
		return "-"
	}
	var parts []string
	for i, r := range records {
		if i == maxRecordsShown {
			parts = append(parts, fmt.Sprintf("+%d more", len(records)-maxRecordsShown))
			break
		}
		clusters := "clusters"
		if r.Clusters == 1 {
			clusters = "cluster"
		}
		parts = append(parts, fmt.Sprintf("%s %d %s %s", r.Environment, r.Clusters, clusters, r.Time.UTC().Format(timeFormat)))
	}
	return strings.Join(parts, "; ")
}

// readyCondition is an object's Ready condition as the UI shows it; Unknown when it has none.
func readyCondition(conds []metav1.Condition) view.Condition {
	c := apimeta.FindStatusCondition(conds, v1.ConditionReady)
	if c == nil {
		return view.Condition{Status: "Unknown"}
	}
	return view.Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
}
