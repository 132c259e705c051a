package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// IsReady reports whether the Cluster's Ready condition is True.
func IsReady(c *v1.Cluster) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, v1.ConditionReady)
}

// Selector parses an Environment's clusterSelector. Its error names the field and the fix.
func Selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("spec.clusterSelector does not parse: %v; fix it: matchLabels, or matchExpressions "+
			"with operator In or NotIn and at least one value, or Exists or DoesNotExist without values", err)
	}
	return s, nil
}

// Members returns the Clusters of clusters the selector picks that are not being deleted (a
// Cluster being deleted has left every Environment): an Environment's member Clusters, in the
// order of clusters. Each is Ready as IsReady says; the Serving holds those that are not.
func Members(sel labels.Selector, clusters []v1.Cluster) []*v1.Cluster {
	var out []*v1.Cluster
	for i := range clusters {
		if c := &clusters[i]; c.DeletionTimestamp.IsZero() && sel.Matches(labels.Set(c.Labels)) {
			out = append(out, c)
		}
	}
	return out
}

// Count returns how many of the Clusters the selector picks (Members), and how many of those
// are Ready.
func Count(sel labels.Selector, clusters []v1.Cluster) (selected, ready int32) {
	for _, c := range Members(sel, clusters) {
		selected++
		if IsReady(c) {
			ready++
		}
	}
	return selected, ready
}

// Fleet is the member Cluster c as a Serving's fleet plan reads it: its server, and whether it
// is Ready and, when not, why as a tenant may read it: the Ready reason only (the probe's error,
// with server URL, addresses and TLS details, stays on the Cluster), or "not probed yet".
func Fleet(c *v1.Cluster) fleet.Cluster {
	fc := fleet.Cluster{Name: c.Name, Server: c.Spec.Server}
	cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
	switch {
	case cond == nil:
		fc.NotReadyMessage = "not probed yet"
	case cond.Status == metav1.ConditionTrue:
		fc.Ready = true
	default:
		fc.NotReadyMessage = cond.Reason
	}
	return fc
}
