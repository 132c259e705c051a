// Package analysis holds the pure rules of an HTTP verification that runs once per cluster
// (a verification's perCluster, compare, failFor and failures): the placeholders of its url and
// body (CheckPlaceholders, Expand), what a cluster's answer measured (PrometheusValue), the
// comparison of the wave's answers with the baseline's, the clusters of the Environment still on
// the release before (Judge), and when a failed run counts against the failure limit
// (Sustained). It reads and writes nothing: internal/verify sends the requests and keeps the
// results.
package analysis
