package preparation

import (
	"sort"
	"strconv"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Retention: which of an Order's Preparations the collector may delete.

// Keeps says which Preparations of an Order are kept whatever their age: the Order's latest,
// the one its Serving names, and those whose artifact the Serving Runs (status.revision, and
// what every cluster last synced: status.running). While the Serving's status.running leaves
// revisions out, every Preparation is kept.
func Keeps(order *v1.Order, s *v1.Serving) func(*v1.Preparation) bool {
	if s != nil && s.Status.RunningOmitted > 0 {
		return func(*v1.Preparation) bool { return true }
	}
	names := map[string]bool{order.Status.LatestPreparation: true}
	digests := map[string]bool{}
	if s != nil {
		names[s.Spec.PreparationName] = true
		if st := s.Status.Rollout; st != nil {
			// What a roll-out goes back to, and what its waves not reached yet run: a rollback
			// writes them into Applications after it chose them.
			names[st.Preparation], names[st.From], names[st.RollbackTo] = true, true, true
		}
		for _, d := range Runs(s) {
			digests[d] = true
		}
	}
	delete(names, "")
	return func(p *v1.Preparation) bool { return names[p.Name] || digests[p.Spec.Artifact.Digest] }
}

// Runs lists the artifact digests a Serving Runs, sorted and each once: its revision and what
// its clusters last synced (status.running counts every cluster; status.targets is read too,
// for a status written before running was). When status.running leaves revisions out, the
// last entry is "+N more": Keeps then keeps everything.
func Runs(s *v1.Serving) []string {
	seen := map[string]bool{}
	add := func(d string) {
		if d != "" {
			seen[d] = true
		}
	}
	add(s.Status.Revision)
	for _, r := range s.Status.Running {
		add(r.Revision)
	}
	for _, t := range s.Status.Targets {
		add(t.Revision)
	}
	out := make([]string, 0, len(seen)+1)
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	if n := s.Status.RunningOmitted; n > 0 {
		out = append(out, "+"+strconv.Itoa(int(n))+" more")
	}
	return out
}

// Collectible returns the Preparations of one Order that are older than its newest history
// ones and that keep does not keep, oldest first. Age is the creation time; Preparations made
// in the same second are ordered by their parents (a Preparation is younger than the one whose
// digest is its parentDigest), then by name.
func Collectible(preps []*v1.Preparation, history int, keep func(*v1.Preparation) bool) []*v1.Preparation {
	if len(preps) <= history {
		return nil
	}
	depth := ancestry(preps)
	sorted := append([]*v1.Preparation(nil), preps...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if depth[a] != depth[b] {
			return depth[a] < depth[b]
		}
		return a.Name < b.Name
	})
	// Creation times have a resolution of a second, and the parent chain breaks where an older
	// Preparation was collected: one made in the same second as the oldest kept one goes only
	// when the chain shows it older (an ancestor of it); otherwise it may be newer, and stays.
	boundary := sorted[len(sorted)-history]
	ancestors := ancestorsOf(boundary, preps)
	var out []*v1.Preparation
	for _, p := range sorted[:len(sorted)-history] {
		older := p.CreationTimestamp.Before(&boundary.CreationTimestamp) || ancestors[p]
		if older && !keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// ancestorsOf lists p's ancestors among preps, following parentDigest.
func ancestorsOf(p *v1.Preparation, preps []*v1.Preparation) map[*v1.Preparation]bool {
	byDigest := make(map[string]*v1.Preparation, len(preps))
	for _, q := range preps {
		byDigest[q.Spec.Artifact.Digest] = q
	}
	out := map[*v1.Preparation]bool{}
	for parent := byDigest[p.Spec.ParentDigest]; parent != nil && !out[parent] && parent != p; parent = byDigest[parent.Spec.ParentDigest] {
		out[parent] = true
	}
	return out
}

// ancestry counts each Preparation's ancestors among preps, following parentDigest.
func ancestry(preps []*v1.Preparation) map[*v1.Preparation]int {
	depth := make(map[*v1.Preparation]int, len(preps))
	for _, p := range preps {
		depth[p] = len(ancestorsOf(p, preps))
	}
	return depth
}
