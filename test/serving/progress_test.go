package serving

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// expectJoined checks that the ClusterJoined Events of the Serving name each of clusters once,
// in a single Event: they joined in one reconcile. Under injected API faults a failed create
// joins in a later reconcile, with an Event of its own; and an Event may be lost, as Events are
// in Kubernetes (client-go drops one the API server answers with an error, and a create whose
// answer was lost is not known to have joined), so there no cluster is named twice, and after
// waiting 30 s for client-go's retries (as expectEvents does) none may be named at all:
// clusters that joined together share one Event, which may be the one lost.
func (f *fixture) expectJoined(clusters ...string) {
	f.t.Helper()
	start := time.Now()
	f.eventually("ClusterJoined Events naming "+strings.Join(clusters, ", "), func() error {
		got := f.events("ClusterJoined")
		for _, c := range clusters {
			named := regexp.MustCompile(`(^|[ ,:])` + regexp.QuoteMeta(c) + `([,: ]|$)`)
			n := 0
			for _, m := range got {
				if named.MatchString(m) {
					n++
				}
			}
			if n > 1 || (n == 0 && faults == nil) {
				return fmt.Errorf("%d ClusterJoined Events name %s: %q", n, c, got)
			}
		}
		if len(got) == 0 && (faults == nil || time.Since(start) < 30*time.Second) {
			return fmt.Errorf("no ClusterJoined Event names any of %s", strings.Join(clusters, ", "))
		}
		if faults == nil && len(got) != 1 {
			return fmt.Errorf("%d ClusterJoined Events, want one: %q", len(got), got)
		}
		return nil
	})
}

// progressMessage matches the Ready message of a roll-out written in slices.
var progressMessage = regexp.MustCompile(`writing Applications: ([0-9,]+) of ([0-9,]+)`)

// clusterName matches the names of the test's clusters, p-00000 to p-99999.
var clusterName = regexp.MustCompile(`p-[0-9]{5}`)

func TestALargeRollOutWritesItsProgressInSlicesAndConverges(t *testing.T) {
	const n = 400 // 8 slices of cfg.ApplicationWriteSlice (50)
	f := newFixture(t)
	f.manyClusters("p", n, func(int) bool { return true })

	// Every status the Serving goes through, from a watch.
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	w, err := wc.Watch(ctx, &v1.ServingList{}, client.InNamespace(f.ns))
	must(t, err)
	var mu sync.Mutex
	var messages []string
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*v1.Serving)
			if !ok {
				continue
			}
			if c := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady); c != nil {
				mu.Lock()
				if len(messages) == 0 || messages[len(messages)-1] != c.Message {
					messages = append(messages, c.Message)
				}
				mu.Unlock()
			}
		}
	}()

	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.eventually(fmt.Sprintf("%d Applications", n), func() error {
		if got := len(f.apps()); got != n {
			return fmt.Errorf("%d", got)
		}
		return nil
	})
	f.ready(v1.ReasonProgressing, "waiting for p-00000")

	// Exactly one Application per cluster.
	perCluster := map[string]int{}
	for _, app := range f.apps() {
		perCluster[app.GetLabels()[argocd.LabelCluster]]++
	}
	for i := range n {
		if c := fmt.Sprintf("p-%05d", i); perCluster[c] != 1 {
			t.Errorf("%d Applications for %s", perCluster[c], c)
		}
	}

	// The status said how far the writes got while they went.
	mu.Lock()
	seen := append([]string(nil), messages...)
	mu.Unlock()
	var progress []int
	for _, m := range seen {
		if sub := progressMessage.FindStringSubmatch(m); sub != nil {
			done, _ := strconv.Atoi(strings.ReplaceAll(sub[1], ",", ""))
			total, _ := strconv.Atoi(strings.ReplaceAll(sub[2], ",", ""))
			if total != n || done <= 0 || done >= n {
				t.Errorf("progress %q, want between 0 and %d of %d", m, n, n)
			}
			progress = append(progress, done)
		}
	}
	t.Logf("progress written: %v", progress)
	if len(progress) == 0 {
		t.Fatalf("no status showed the progress of the writes; Ready went through %q", seen)
	}
	// At most one progress write per 2 s, and slices of 50.
	if len(progress) > n/50 {
		t.Errorf("%d progress writes for %d slices", len(progress), n/50)
	}

	// One ClusterJoined Event per slice, not per cluster.
	events := f.events("ClusterJoined")
	if len(events) == 0 || len(events) > n/50+2 {
		t.Errorf("%d ClusterJoined Events for %d clusters in slices of 50: %q", len(events), n, events)
	}
	for _, e := range events {
		// Distinct cluster names: an Event for one cluster names it twice, once in the
		// Application's name.
		names := map[string]bool{}
		for _, c := range clusterName.FindAllString(e, -1) {
			names[c] = true
		}
		if named := len(names); named > 10 || named > 1 && !strings.Contains(e, "joining clusters") {
			t.Errorf("Event %q does not summarise the clusters (it names %d)", e, named)
		}
	}
}
