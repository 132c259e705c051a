package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
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

// Count returns how many of the Clusters the selector picks, and how many of those are Ready.
// A Cluster being deleted has left every Environment.
func Count(sel labels.Selector, clusters []v1.Cluster) (selected, ready int32) {
	for i := range clusters {
		if !clusters[i].DeletionTimestamp.IsZero() || !sel.Matches(labels.Set(clusters[i].Labels)) {
			continue
		}
		selected++
		if IsReady(&clusters[i]) {
			ready++
		}
	}
	return selected, ready
}
