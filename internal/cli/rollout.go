package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// rolloutHelp is what pause, resume and abort share of their help.
const rolloutHelp = `The command writes the Serving's spec.rollout as you, naming you in spec.rollout.by
as the API server knows you (kubectl auth whoami): Kokumi's admission policy
refuses a change of spec.rollout that names someone else, so the Events Kokumi
records of it ("alice paused the roll-out …") say who did it. You need the patch
verb on Servings of the namespace (the edit and admin roles have it; view does not).

A Serving whose Environment has no roll-out policy deploys to every cluster at once;
paused or aborted, it rolls out as one wave, named "all".`

func newPauseCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "pause SERVING",
		Short: "Stop the roll-out of the Serving's Preparation where it stands",
		Long: `Pause the roll-out of the Preparation a Serving deploys: no further cluster is
changed until you resume it. The clusters already updated keep what they run, and
a failure past the Environment's failure budget still halts or rolls back.

` + rolloutHelp,
		Example: `  # Hold the roll-out of the Serving web of namespace shop
  kubectl kokumi pause web -n shop

  # Where does it stand? (the roll-out's state reads Paused, and who paused it)
  kubectl kokumi status web -n shop

  # Let it go on
  kubectl kokumi resume web -n shop`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sv, changed, err := o.askRollout(cmd.Context(), args[0], rollout.Pause, "")
			if err != nil {
				return err
			}
			resume := fmt.Sprintf("`%s resume %s -n %s`", DisplayName, sv.Name, sv.Namespace)
			if !changed {
				return o.printf("The roll-out of Preparation %s of Serving %s/%s was already paused by %s: nothing changed; no further cluster is changed until %s\n",
					sv.Spec.PreparationName, sv.Namespace, sv.Name, orNone(sv.Spec.Rollout.By), resume)
			}
			return o.printf("Paused the roll-out of Preparation %s of Serving %s/%s: no further cluster is changed until %s\n",
				sv.Spec.PreparationName, sv.Namespace, sv.Name, resume)
		},
	}
}

func newResumeCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "resume SERVING",
		Short: "Let a paused roll-out go on",
		Long: `Resume the roll-out of the Preparation a Serving deploys, after a pause: the waves
go on from where they stood. A roll-out that is not paused stays as it is.

` + rolloutHelp,
		Example: `  # Let the roll-out of the Serving web of namespace shop go on
  kubectl kokumi resume web -n shop`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sv, changed, err := o.askRollout(cmd.Context(), args[0], rollout.Resume, "")
			if err != nil {
				return err
			}
			if !changed {
				return o.printf("The roll-out of Serving %s/%s is not paused: nothing changed\n", sv.Namespace, sv.Name)
			}
			return o.printf("Resumed the roll-out of Preparation %s of Serving %s/%s: the waves go on from where they stood\n",
				sv.Spec.PreparationName, sv.Namespace, sv.Name)
		},
	}
}

func newAbortCommand(o *options) *cobra.Command {
	var preparation string
	cmd := &cobra.Command{
		Use:   "abort SERVING",
		Short: "Abort the roll-out of the Serving's Preparation and undo what it changed",
		Long: `Abort the roll-out of the Preparation a Serving deploys: every cluster it changed
goes back to the last Preparation of the Order with a deployment record in the
Environment (or, when there is none, stays as it is), and no further cluster is
changed. The abort holds while the Serving deploys that Preparation: promote another
(or roll back) to deploy something else. To roll the same Preparation out again,
from its first wave, clear spec.rollout.abort.

--preparation names the Preparation you mean to abort; the command refuses when the
Serving rolls out another, so that an abort meant for one release never stops the
next.

` + rolloutHelp,
		Example: `  # Abort the roll-out of the Serving web of namespace shop
  kubectl kokumi abort web -n shop

  # Abort only if it still rolls out web-7c9f
  kubectl kokumi abort web -n shop --preparation web-7c9f`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sv, _, err := o.askRollout(cmd.Context(), args[0], rollout.Abort, preparation)
			if err != nil {
				return err
			}
			return o.printf("Aborted the roll-out of Preparation %s of Serving %s/%s: the clusters it changed go back to what ran before; see `%s status %s -n %s`\n",
				sv.Spec.PreparationName, sv.Namespace, sv.Name, DisplayName, sv.Name, sv.Namespace)
		},
	}
	cmd.Flags().StringVar(&preparation, "preparation", "", "the Preparation whose roll-out to abort; refused unless the Serving rolls it out (default: the one it rolls out)")
	return cmd
}

// askRollout writes what rollout.Ask makes of act into the Serving's spec.rollout, as the
// kubeconfig's user, naming them in by as a SelfSubjectReview says the API server knows them,
// and returns the Serving as written and whether it changed.
func (o *options) askRollout(ctx context.Context, name string, act rollout.Action, preparation string) (*v1.Serving, bool, error) {
	c, ns, err := o.client()
	if err != nil {
		return nil, false, err
	}
	by, err := whoAmI(ctx, c)
	if err != nil {
		return nil, false, err
	}
	sv, err := getServing(ctx, c, ns, name)
	if err != nil {
		return nil, false, err
	}
	control, changed, err := rollout.Ask(sv, act, preparation, by)
	var refusal *rollout.Refusal
	if errors.As(err, &refusal) && refusal.Field == "preparation" {
		return nil, false, fmt.Errorf("--preparation: %s", refusal.Message)
	}
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return sv, false, nil
	}
	patch := client.MergeFromWithOptions(sv.DeepCopy(), client.MergeFromWithOptimisticLock{})
	sv.Spec.Rollout = control
	if err := c.Patch(ctx, sv, patch); err != nil {
		if apierrors.IsConflict(err) {
			return nil, false, fmt.Errorf("the Serving %s/%s changed while it was being patched: run the command again", ns, name)
		}
		return nil, false, explain(kindServing, "patch", ns, name, err)
	}
	return sv, true, nil
}

// whoAmI asks the API server the kubeconfig user's name, as kubectl auth whoami does.
func whoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("ask the API server who you are (a SelfSubjectReview, as kubectl auth whoami does): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server did not say who you are (SelfSubjectReview): kubectl auth whoami should name you")
	}
	return review.Status.UserInfo.Username, nil
}

// printf writes to the command's output.
func (o *options) printf(format string, args ...any) error {
	_, err := fmt.Fprintf(o.streams.Out, format, args...)
	return err
}
