package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"
)

func newApproveCommand(o *options) *cobra.Command {
	var wave, preparation string
	cmd := &cobra.Command{
		Use:   "approve SERVING",
		Short: "Approve a gate of the roll-out of the Serving's Preparation",
		Long: `Approve a gate of the roll-out of the Preparation a Serving deploys: the Environment's
own gate (spec.approval: before the release rolls out to the Environment at all) or a
wave's (spec.rollout.waves[].approval: before that wave starts). The roll-out goes past
the gate once as many different people as it asks (approval.required) approved.

Without --wave, the command approves the gate the roll-out waits at now (kubectl
kokumi status says "awaiting approval"); when none waits, the Environment's gate.
--wave names a wave to approve ahead of time, or "environment" for the Environment's
gate. --preparation names the Preparation you mean to approve; the command refuses
when the Serving rolls out another, so that an approval meant for one release never
lets the next one through.

The command adds an approval naming you, as the API server knows you
(kubectl auth whoami), and the roll-out attempt under way (status.rollout.attempt),
to the Serving's spec.approvals: it counts for that attempt alone, not after an abort
is cleared or the Preparation is promoted away and back. Kokumi's admission policy
kokumi-serving-approval refuses an approval that names someone else, and one from
whoever lacks the verb approve on the Serving: the ClusterRole kokumi-approver grants
it; the edit and admin roles do not, so that whoever may promote does not also
approve by default. When the gate asks for separation (approval.separateFromPromoter),
the person who promoted the Preparation (spec.promotedBy), and those who wrote the
Order's or Product's spec it was rendered from (status.rollout.authors), cannot
approve it.`,
		Example: `  # Approve the gate the roll-out of the Serving web of namespace shop waits at
  kubectl kokumi approve web -n shop

  # Approve the wave canary ahead of time, only if web-7c9f is what rolls out
  kubectl kokumi approve web -n shop --wave canary --preparation web-7c9f

  # May I approve here?
  kubectl auth can-i approve servings.delivery.kokumi.dev -n shop`,
		Args: exactArgs("serving"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.approve(cmd.Context(), args[0], wave, cmd.Flags().Changed("wave"), preparation)
		},
	}
	cmd.Flags().StringVar(&wave, "wave", "", `the wave to approve, or "environment" for the Environment's gate (default: the gate the roll-out waits at, else the Environment's)`)
	cmd.Flags().StringVar(&preparation, "preparation", "", "the Preparation to approve; refused unless the Serving rolls it out (default: the one it rolls out)")
	return cmd
}

// approve adds the kubeconfig user's approval of a gate of the Serving's roll-out, as
// rollout.Approve makes it, naming them as a SelfSubjectReview says the API server knows them.
func (o *options) approve(ctx context.Context, name, wave string, waveSet bool, preparation string) error {
	c, ns, err := o.client()
	if err != nil {
		return err
	}
	by, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	sv, order, err := servingAndOrder(ctx, c, ns, name)
	if err != nil {
		return err
	}
	var env v1.Environment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: order.Spec.EnvironmentRef.Name}, &env); err != nil {
		return explain(kindEnvironment, "get", ns, order.Spec.EnvironmentRef.Name, err)
	}
	if !waveSet && sv.Status.Rollout != nil {
		wave = sv.Status.Rollout.Awaiting
	}
	wave = view.GateWave(wave)
	approvals, err := rollout.Approve(&env, sv, wave, preparation, by)
	var refusal *rollout.Refusal
	if errors.As(err, &refusal) && refusal.Field != "" {
		return fmt.Errorf("--%s: %s", refusal.Field, refusal.Message)
	}
	if err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(sv.DeepCopy(), client.MergeFromWithOptimisticLock{})
	sv.Spec.Approvals = approvals
	if err := c.Patch(ctx, sv, patch); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("the Serving %s/%s changed while it was being patched: run the command again", ns, name)
		}
		return explain(kindServing, "patch", ns, name, err)
	}
	policy := rollout.ApprovalGate(&env, wave)
	approvers, _ := rollout.ApproversOf(sv, policy, wave)
	required := rollout.Required(policy)
	next := rollout.AfterApproval(sv, len(approvers), required)
	return o.printf("Approved %s of Preparation %s of Serving %s/%s as %s: %d of %d approvals (%s); %s\n",
		rollout.GateName(wave), sv.Spec.PreparationName, ns, sv.Name, by, len(approvers), required, strings.Join(approvers, ", "), next)
}
