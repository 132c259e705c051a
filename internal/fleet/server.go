package fleet

import "github.com/kokumi-dev/kokumi/internal/argocd"

// ServerOwners decides which Cluster deploys to each server, for the Cluster reconciler and for
// a Serving alike: of the Clusters that connect to one server, as Argo CD compares servers
// (argocd.NormalizeServer: a trailing "/", upper case or ":443" do not make another one), the
// first by name. Argo CD identifies a cluster by its server and keeps one cluster Secret per
// server, so only that Cluster gets an Argo CD cluster Secret (the others are not Ready,
// ServerConflict) and only that Cluster gets a Serving's Application (the others are held,
// ClusterConflict): the Cluster that deploys is the one whose identity Argo CD uses. The order
// does not depend on which Cluster came first, so every caller decides the same.
//
// It returns, by Cluster name, the name of the Cluster that owns its server: its own name when
// it is the owner. Only the Name and Server of each Cluster are read.
func ServerOwners(clusters []Cluster) map[string]string {
	servers := make([]string, len(clusters))
	first := make(map[string]string, len(clusters))
	for i, c := range clusters {
		servers[i] = argocd.NormalizeServer(c.Server)
		if owner, ok := first[servers[i]]; !ok || c.Name < owner {
			first[servers[i]] = c.Name
		}
	}
	owners := make(map[string]string, len(clusters))
	for i, c := range clusters {
		owners[c.Name] = first[servers[i]]
	}
	return owners
}
