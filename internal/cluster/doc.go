// Package cluster is the pure logic behind Kokumi's Clusters and Environments: it reads a
// credentials Secret into credentials, turns them into a client configuration and into Argo
// CD's cluster Secret, probes a server and classifies the answer into a Ready reason, decides
// when a failed probe turns Ready False, and spreads probes with jitter. It owns which Clusters
// an Environment has (Members: selected, not being deleted, each Ready or not), which the
// Serving, the Environment, the preview, the server and the plugin all read, and how a member
// reads in a Serving's fleet plan (Fleet: Ready, or why not as a tenant may read it). It holds
// no client of its own.
package cluster
