package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// deployedEvery is how often `kokumi dev` looks whether the example's Servings are Deployed.
const deployedEvery = 2 * time.Second

// reportDeployed prints a line each time a Serving of namespace becomes Deployed at a
// revision it was not Deployed at before, with the time since started, until ctx ends: a
// newcomer sees when the example runs, and how long it took.
func reportDeployed(ctx context.Context, c client.Reader, namespace string, out io.Writer, started time.Time) {
	seen := map[string]string{}
	for {
		var list v1.ServingList
		if err := c.List(ctx, &list, client.InNamespace(namespace)); err == nil {
			for _, line := range newlyDeployed(list.Items, seen, time.Since(started)) {
				fmt.Fprintln(out, line)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(deployedEvery):
		}
	}
}

// newlyDeployed returns a line for each Serving Deployed at a revision seen does not hold for
// it yet, and records it there.
func newlyDeployed(servings []v1.Serving, seen map[string]string, since time.Duration) []string {
	var lines []string
	for _, s := range servings {
		ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
		if ready == nil || ready.Reason != v1.ReasonDeployed || seen[s.Name] == s.Status.Revision {
			continue
		}
		seen[s.Name] = s.Status.Revision
		lines = append(lines, fmt.Sprintf("Serving %s/%s Deployed %s to %d of %d clusters, %s after start",
			s.Namespace, s.Name, s.Spec.PreparationName, s.Status.Clusters.Healthy, s.Status.Clusters.Selected, since.Round(time.Second)))
	}
	return lines
}
