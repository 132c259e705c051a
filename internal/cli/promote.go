package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// stagesTimeout bounds the check of the stages of an Environment, which reads deployment
// records from registries.
const stagesTimeout = 20 * time.Second

func newPromoteCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "promote SERVING PREPARATION",
		Short: "Deploy one of the Order's Preparations with the Serving",
		Long: `Promote a Preparation: point the Serving at it (spec.preparationName), as you, with
the checks Kokumi's API server makes before it does the same:

  - the Order promotes by hand (spec.promotion.mode Manual); an Automatic Order
    would undo the promotion,
  - the Preparation belongs to the Serving's Order and is Ready,
  - it has passed the stages its Environment requires (spec.requires), reading the
    signed deployment records of the required Environments.

The API server's RBAC decides the patch itself: you need the patch verb on Servings
of the namespace (the edit and admin roles have it; view does not).`,
		Example: `  # How would a promotion to web roll out (waves, clusters, failure budget)?
  kubectl kokumi plan web -n shop

  # Deploy web-7c9f with the Serving web of namespace shop
  kubectl kokumi promote web web-7c9f -n shop

  # Which Preparations are there?
  kubectl kokumi history web -n shop`,
		Args: exactArgs("serving", "preparation"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sv, order, err := servingAndOrder(ctx, c, ns, args[0])
			if err != nil {
				return err
			}
			from := sv.Spec.PreparationName
			prep, err := o.promote(ctx, c, sv, order, args[1])
			if err != nil {
				return err
			}
			if from == prep.Name {
				_, err = fmt.Fprintf(o.streams.Out, "Serving %s/%s already deploys %s (%s): nothing changed\n", ns, sv.Name, prep.Name, shortDigest(prep.Spec.Artifact.Digest))
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "Promoted %s (%s) to Serving %s/%s (it deployed %s)\n", prep.Name, shortDigest(prep.Spec.Artifact.Digest), ns, sv.Name, orNone(from))
			return err
		},
	}
}

func newRollbackCommand(o *options) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "rollback SERVING",
		Short: "Deploy again the Preparation that ran before the current one",
		Long: `Roll a Serving back: promote the Preparation that was deployed before the one it
deploys now, with the checks of promote.

"Before" is decided from what Kokumi records: the previous Preparation is the newest
Preparation of the Serving's Order that was created before the current one and has a
deployment record (status.deploymentRecords: it ran healthily on the Order's clusters).
A Preparation that was promoted but never reached Deployed has no record, and is skipped;
name it with --to to go back to it anyway. --to names any Preparation of the Order.`,
		Example: `  # Go back to what ran before
  kubectl kokumi rollback web -n shop

  # Go back to a given Preparation
  kubectl kokumi rollback web -n shop --to web-5b2a`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sv, order, err := servingAndOrder(ctx, c, ns, args[0])
			if err != nil {
				return err
			}
			// An Automatic Order would undo the rollback: say so before anything else.
			if err := promotion.CheckMode(order); err != nil {
				return fmt.Errorf("cannot roll back Serving %s/%s: %w", ns, sv.Name, err)
			}
			current := sv.Spec.PreparationName
			if current == "" {
				return fmt.Errorf("the Serving %s/%s deploys no Preparation yet, so there is nothing to roll back: promote one with %s promote %s PREPARATION -n %s", ns, sv.Name, DisplayName, sv.Name, ns)
			}
			target := to
			if target == "" {
				preps, err := preparationsOf(ctx, c, ns, order.Name)
				if err != nil {
					return err
				}
				prev, err := previous(preps, current)
				if err != nil {
					return fmt.Errorf("cannot roll back Serving %s/%s: %w", ns, sv.Name, err)
				}
				target = prev.Name
			}
			if target == current {
				return fmt.Errorf("the Serving %s/%s already deploys %s: name another Preparation with --to (see %s history %s -n %s)", ns, sv.Name, current, DisplayName, order.Name, ns)
			}
			prep, err := o.promote(ctx, c, sv, order, target)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "Rolled back Serving %s/%s from %s to %s (%s)\n", ns, sv.Name, current, prep.Name, shortDigest(prep.Spec.Artifact.Digest))
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the Preparation to roll back to (default: the one deployed before the current one)")
	return cmd
}

// servingAndOrder gets a Serving and its Order.
func servingAndOrder(ctx context.Context, c client.Client, ns, name string) (*v1.Serving, *v1.Order, error) {
	sv, err := getServing(ctx, c, ns, name)
	if err != nil {
		return nil, nil, err
	}
	order, err := getOrder(ctx, c, ns, sv.Spec.OrderRef.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("the Serving's Order: %w", err)
	}
	return sv, order, nil
}

// promote checks the promotion as the API server does and patches the Serving as the
// kubeconfig's user, naming them in spec.promotedBy as a SelfSubjectReview says the API server
// knows them.
func (o *options) promote(ctx context.Context, c client.Client, sv *v1.Serving, order *v1.Order, preparation string) (*v1.Preparation, error) {
	rule := stages.Manual{Client: c, Stages: o.pipeline(ctx, c, sv.Namespace), StagesTimeout: stagesTimeout}
	prep, err := rule.Check(ctx, order, preparation)
	if err != nil {
		return nil, fmt.Errorf("cannot promote %s to Serving %s/%s: %w", preparation, sv.Namespace, sv.Name, err)
	}
	if sv.Spec.PreparationName == prep.Name {
		return prep, nil
	}
	// The promotion names its writer (spec.promotedBy), as the admission policy
	// kokumi-serving-approval asks: an approval that must come from someone else reads it.
	by, err := whoAmI(ctx, c)
	if err != nil {
		return nil, err
	}
	patch := client.MergeFrom(sv.DeepCopy())
	sv.Spec.PreparationName, sv.Spec.PromotedBy = prep.Name, by
	if err := c.Patch(ctx, sv, patch); err != nil {
		return nil, explain(kindServing, "patch", sv.Namespace, sv.Name, err)
	}
	return prep, nil
}

// pipeline checks the stages of Environments as the controller does, reading as the
// kubeconfig's user: the Environments, Orders, Servings and Preparations of the namespace,
// Kokumi's public keys (readable by every authenticated user), and the records in the
// registries with the docker config's credentials.
func (o *options) pipeline(ctx context.Context, c client.Client, ns string) *stages.Pipeline {
	// The records live beside the artifacts of the namespace's Preparations.
	hosts := []string{o.bundledRegistry}
	var preps v1.PreparationList
	if err := c.List(ctx, &preps, client.InNamespace(ns)); err == nil {
		seen := map[string]bool{o.bundledRegistry: true}
		for i := range preps.Items {
			repository, _ := preparation.ArtifactLocation(o.bundledRegistry, &preps.Items[i])
			if h := registryHost(repository); !seen[h] {
				seen[h] = true
				hosts = append(hosts, h)
			}
		}
	}
	return &stages.Pipeline{
		Client:          c,
		Records:         &record.Store{Client: o.registryClient(hosts...)},
		Keys:            &record.Keys{Client: c, Namespace: o.kokumiNamespace},
		BundledRegistry: o.bundledRegistry,
		Namespace:       o.kokumiNamespace,
	}
}

// preparationsOf lists the Preparations of an Order, newest first, as the UI lists them
// (promotion.OrderPreparations).
func preparationsOf(ctx context.Context, c client.Client, ns, order string) ([]v1.Preparation, error) {
	var list v1.PreparationList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, explain(kindPreparation, "list", ns, "*", err)
	}
	return promotion.OrderPreparations(list.Items, order), nil
}

// previous picks the Preparation to roll back to from preps (newest first), as the API server
// does (promotion.RollbackTarget), saying to name one with --to when there is none.
func previous(preps []v1.Preparation, current string) (*v1.Preparation, error) {
	prep, err := promotion.RollbackTarget(preps, current)
	if err != nil {
		return nil, fmt.Errorf("%w: name one with --to", err)
	}
	return prep, nil
}
