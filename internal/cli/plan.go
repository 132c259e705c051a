package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"
)

var kindEnvironment = kind{"Environment", "environments"}

// Plan is what `plan` prints: the roll-out a promotion to the Serving would make now.
type Plan struct {
	// Serving and Namespace name the Serving; Environment is its Order's.
	Namespace   string `json:"namespace"`
	Serving     string `json:"serving"`
	Environment string `json:"environment"`
	// ClustersError says why the Clusters could not be listed (the person may not): the plan
	// then shows the policy without its clusters.
	ClustersError string `json:"clustersError,omitempty"`
	// Policy is the Environment's spec.rollout, shown when the Clusters could not be listed.
	Policy *v1.RolloutPolicy `json:"policy,omitempty"`
	rollout.PlanPreview
}

func newPlanCommand(o *options) *cobra.Command {
	var output, prep string
	cmd := &cobra.Command{
		Use:   "plan SERVING",
		Short: "Show how a promotion to the Serving would roll out: waves, clusters, failure budget, windows",
		Long: `Show the roll-out plan of a Serving before promoting: what its Environment's roll-out
policy (spec.rollout) does with the Environment's clusters now, as the UI's Promote
confirmation shows it:

  - each wave, in order: how many clusters, the first names, how many are not Ready
    (held, not counted as failures), how long it soaks, how many update at once,
  - what the failure budget means (halt, or roll back),
  - whether a roll-out window is open now, or when the next one opens.

An Environment without a policy deploys to every cluster at once.

The Clusters are listed with your own credentials. If you may not list Clusters (a
tenant usually may not), the plan says so and shows the policy without cluster names.
With --preparation, the plan is of that Preparation: one the clusters run already (a
rollback after an abort) goes past the approvals that hold only a Preparation no cluster
runs yet, and the plan says so.
It changes nothing; promote with ` + DisplayName + ` promote.`,
		Example: `  # How would a promotion to the Serving web of namespace shop roll out?
  kubectl kokumi plan web -n shop

  # Then promote
  kubectl kokumi promote web web-7c9f -n shop

  # What would rolling back to web-5b2a ask?
  kubectl kokumi plan web -n shop --preparation web-5b2a`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			p, err := planOf(cmd.Context(), c, ns, args[0], prep, time.Now())
			if err != nil {
				return err
			}
			return printPlan(o.streams.Out, p, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	cmd.Flags().StringVar(&prep, "preparation", "", "the Preparation to promote (default: one no cluster runs yet)")
	return cmd
}

// planOf previews the roll-out of a promotion of prep (empty: one no cluster runs yet) to the
// Serving ns/name at now.
func planOf(ctx context.Context, c client.Client, ns, name, prep string, now time.Time) (*Plan, error) {
	sv, order, err := servingAndOrder(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	running := 0
	if prep != "" {
		var p v1.Preparation
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: prep}, &p); err != nil {
			return nil, explain(kindPreparation, "get", ns, prep, err)
		}
		running = int(view.RunsOf(sv, []v1.Preparation{p}).Clusters[prep])
	}
	p := &Plan{Namespace: ns, Serving: sv.Name, Environment: order.Spec.EnvironmentRef.Name}
	var envt v1.Environment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Environment}, &envt); err != nil {
		if apierrors.IsNotFound(err) && p.Environment == v1.LocalEnvironmentName {
			p.PlanPreview = rollout.Preview(nil, nil, now)
			p.Summary = []string{"Environment local is the cluster Kokumi runs in, when an admin enabled it: a promotion deploys there at once"}
			return p, nil
		}
		return nil, explain(kindEnvironment, "get", ns, p.Environment, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&envt.Spec.ClusterSelector)
	if err != nil {
		return nil, fmt.Errorf("the cluster selector of Environment %s/%s cannot be read (a promotion deploys nowhere until an admin fixes it): %w", ns, p.Environment, err)
	}
	var list v1.ClusterList
	if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		if !apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("list the Clusters of Environment %s/%s: %w", ns, p.Environment, err)
		}
		p.ClustersError = fmt.Sprintf("you may not list Clusters (%s): this plan shows the policy of Environment %s without its clusters; an admin sees which cluster is in which wave with the same command", apiMessage(err), p.Environment)
		p.Policy = envt.Spec.Rollout
		p.AllAtOnce = envt.Spec.Rollout == nil
		p.Waves = []rollout.WavePreview{}
		if p.AllAtOnce {
			p.Summary = []string{"every cluster at once, as without a policy"}
			return p, nil
		}
		p.FailureBudget, p.OnFailure = envt.Spec.Rollout.FailureBudget, string(envt.Spec.Rollout.OnFailure)
		if p.OnFailure == "" {
			p.OnFailure = string(v1.RolloutHalt)
		}
		p.Summary, p.Windows = rollout.PolicySentences(envt.Spec.Rollout, now)
		return p, nil
	}
	p.PlanPreview = rollout.PreviewSelected(&envt, order.Spec.RolloutPace, selector, list.Items, running, now)
	return p, nil
}

func printPlan(out io.Writer, p *Plan, output string) error {
	if done, err := printStructured(out, p, output); done {
		return err
	}
	w := &errWriter{w: out}
	w.printf("Roll-out plan of Serving %s/%s to Environment %s\n", p.Namespace, p.Serving, p.Environment)
	if p.ClustersError != "" {
		w.printf("Note: %s\n", p.ClustersError)
	}
	for _, s := range p.Summary {
		w.printf("  - %s\n", s)
	}
	if w.err != nil {
		return w.err
	}
	if p.Policy != nil {
		return printPolicyWaves(out, p.Policy)
	}
	if len(p.Waves) == 0 {
		return nil
	}
	w.printf("\n")
	tw := printers.GetNewTabWriter(out)
	tw2 := &errWriter{w: tw}
	tw2.printf("WAVE\tCLUSTERS\tNOT READY\tAT ONCE\tSOAK\tCLUSTER NAMES\n")
	for _, wv := range p.Waves {
		names := strings.Join(wv.Names, ", ")
		if wv.MoreNames > 0 {
			names += fmt.Sprintf(" and %d more", wv.MoreNames)
		}
		tw2.printf("%s\t%d\t%d\t%d\t%s\t%s\n", wv.Name, wv.Clusters, wv.NotReady, wv.MaxUnavailable, orDash(wv.Soak), orDash(names))
	}
	if tw2.err != nil {
		return tw2.err
	}
	return tw.Flush()
}

// printPolicyWaves prints the waves of a policy as the Environment writes them, for a person
// who may not list its Clusters.
func printPolicyWaves(out io.Writer, policy *v1.RolloutPolicy) error {
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	tw := printers.GetNewTabWriter(out)
	w := &errWriter{w: tw}
	w.printf("WAVE\tCLUSTER SELECTOR\tSOAK\tMAX UNAVAILABLE\n")
	for _, wv := range policy.Waves {
		sel := "every cluster no earlier wave selects"
		if wv.ClusterSelector != nil {
			sel = metav1.FormatLabelSelector(wv.ClusterSelector)
		}
		soak, limit := "-", "all at once"
		if wv.Soak != nil && wv.Soak.Duration > 0 {
			soak = wv.Soak.Duration.String()
		}
		if wv.MaxUnavailable != nil {
			limit = wv.MaxUnavailable.String()
		}
		w.printf("%s\t%s\t%s\t%s\n", wv.Name, sel, soak, limit)
	}
	if catchAll := slices.ContainsFunc(policy.Waves, func(wv v1.RolloutWave) bool { return wv.ClusterSelector == nil }); !catchAll {
		w.printf("%s\t%s\t-\tall at once\n", v1.UnselectedWave, "the clusters no wave selects")
	}
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}
