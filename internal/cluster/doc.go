// Package cluster is the pure logic behind Kokumi's Clusters and Environments: it reads a
// credentials Secret into credentials, turns them into a client configuration and into Argo
// CD's cluster Secret, probes a server and classifies the answer into a Ready reason, decides
// when a failed probe turns Ready False, spreads probes with jitter, and counts the Clusters an
// Environment selects. It holds no client of its own.
package cluster
