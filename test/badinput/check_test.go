package badinput

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// check runs one row: x.broke() marks when the bad input was given; x.sees and x.refused
// check what the user sees against the row, by the deadline.
type check struct {
	*fixture
	row   *badInput
	start time.Time
}

// broke marks the moment the bad input is given: the deadline runs from here.
func (x *check) broke() { x.start = time.Now() }

// refused checks that the API server refused the input with a message naming row.mentions.
// An object it accepted is deleted, so that it does no harm to the other cases.
func (x *check) refused(obj client.Object, err error) {
	x.t.Helper()
	if err == nil {
		x.t.Errorf("the API server accepted %s %s; want it refused naming %q", kindOf(obj), obj.GetName(), x.row.mentions)
		if derr := env.Client.Delete(x.ctx, obj); derr != nil && !apierrors.IsNotFound(derr) {
			x.t.Errorf("delete it: %v", derr)
		}
		return
	}
	x.named(err.Error())
	record(x.row.name, time.Since(x.start))
}

// named checks that msg names each of row.mentions and reads well.
func (x *check) named(msg string) {
	x.t.Helper()
	for _, m := range x.row.mentions {
		if !strings.Contains(msg, m) {
			x.t.Errorf("the message does not name %q: %s", m, msg)
		}
	}
	if err := readable(msg); err != nil {
		x.t.Error(err)
	}
}

// sees waits, by the deadline, for obj's Ready condition to say row.reason, and checks that its
// message names row.mentions; it returns the condition.
func (x *check) sees(obj client.Object) *metav1.Condition {
	x.t.Helper()
	if kind := kindOf(obj); kind != x.row.on {
		x.t.Fatalf("the row says the user sees it on %s; the case looks at %s", x.row.on, kind)
	}
	c := x.seesReason(obj, x.row.reason)
	x.named(c.Message)
	record(x.row.name, time.Since(x.start))
	return c
}

// alsoSees waits, by the deadline, for obj's Ready condition to have the reason row.also
// gives its kind.
func (x *check) alsoSees(obj client.Object) {
	x.t.Helper()
	reason, ok := x.row.also[kindOf(obj)]
	if !ok {
		x.t.Fatalf("the row does not say what %s shows", kindOf(obj))
	}
	x.seesReason(obj, reason)
}

// kindOf names the kind of one of Kokumi's objects.
func kindOf(obj client.Object) string {
	if kind := obj.GetObjectKind().GroupVersionKind().Kind; kind != "" {
		return kind
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1alpha1.")
}

// seesReason waits, by the deadline, for obj's Ready condition to have reason.
func (x *check) seesReason(obj client.Object, reason string) *metav1.Condition {
	x.t.Helper()
	var c *metav1.Condition
	waitFor(x.t, fmt.Sprintf("%s %s Ready %s", kindOf(obj), obj.GetName(), reason), x.start.Add(deadline), func() error {
		var err error
		if c, err = ready(x.ctx, obj); err != nil {
			return err
		}
		if c.Reason != reason || c.ObservedGeneration != obj.GetGeneration() {
			return fmt.Errorf("Ready is %s %s (generation %d of %d): %s", c.Status, c.Reason, c.ObservedGeneration, obj.GetGeneration(), c.Message)
		}
		return nil
	})
	return c
}

// createUnstructured creates an object of kind (one of Kokumi's) in the case's namespace, or
// cluster-wide for a Cluster, as a person writes it in YAML, and returns it with the error.
func (x *check) createUnstructured(kind, name string, spec map[string]any) (client.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	u.SetName(name)
	if kind != "Cluster" {
		u.SetNamespace(x.ns)
	}
	x.broke()
	return u, env.Client.Create(x.ctx, u)
}

// createTyped creates obj and returns it with the error.
func (x *check) createTyped(obj client.Object) (client.Object, error) {
	x.broke()
	return obj, env.Client.Create(x.ctx, obj)
}

// timings are how long each case took from its bad input to what the user sees.
var timings = struct {
	sync.Mutex
	by map[string]time.Duration
}{by: map[string]time.Duration{}}

func record(name string, d time.Duration) {
	timings.Lock()
	defer timings.Unlock()
	timings.by[name] = d
}

// TestBadInput runs every row: first all those that are not late, at once, then the late ones.
func TestBadInput(t *testing.T) {
	run := func(t *testing.T, late bool) {
		for i := range table {
			row := &table[i]
			if row.late != late {
				continue
			}
			t.Run(row.name, func(t *testing.T) {
				t.Parallel()
				x := &check{fixture: newFixture(t, "bi-"+row.name), row: row}
				x.start = time.Now()
				row.run(x)
			})
		}
	}
	t.Run("at-once", func(t *testing.T) { run(t, false) })
	t.Run("late", func(t *testing.T) { run(t, true) })

	timings.Lock()
	defer timings.Unlock()
	names := make([]string, 0, len(timings.by))
	var longest time.Duration
	for name, d := range timings.by {
		names = append(names, name)
		longest = max(longest, d)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Logf("%-48s %6.1fs", name, timings.by[name].Seconds())
	}
	t.Logf("%d cases seen; the longest took %.1fs (deadline %v)", len(names), longest.Seconds(), deadline)
}

// TestTheTableCoversEveryKind keeps the table at its promise: at least 40 rows, every kind and
// the credentials Secret, every row complete.
func TestTheTableCoversEveryKind(t *testing.T) {
	if len(table) < 40 {
		t.Errorf("%d rows, want at least 40", len(table))
	}
	seen := map[string]bool{}
	names := map[string]bool{}
	for _, row := range table {
		seen[row.kind] = true
		if names[row.name] {
			t.Errorf("two rows named %s", row.name)
		}
		names[row.name] = true
		if row.input == "" || row.on == "" || row.keeps == "" || len(row.mentions) == 0 || row.run == nil {
			t.Errorf("row %s is incomplete", row.name)
		}
		if (row.on == refusedAt) != (row.reason == "") {
			t.Errorf("row %s: a refusal has no reason, a condition has one", row.name)
		}
		if len("bi-"+row.name) > 63 {
			t.Errorf("row %s: its namespace name is too long", row.name)
		}
	}
	for _, kind := range []string{"Product", "Order", "Preparation", "Serving", "Environment", "Cluster", "Secret"} {
		if !seen[kind] {
			t.Errorf("no row for %s", kind)
		}
	}
}

// host is the host[:port] of a URL.
func host(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	return parsed.Host
}

// fresh creates the Product p and an Order web of it to the Environment edge (which does not
// exist: the Order renders all the same), in Manual mode.
func (x *check) fresh(p *v1.Product) {
	x.t.Helper()
	x.create(p)
	x.broke()
	x.order("web", p.Name, "edge", v1.PromotionManual)
}

// withValues is a Product of the chart web whose values are the working ones changed by edit.
func (x *check) withValues(edit func(map[string]any)) *v1.Product {
	v := webValues()
	edit(v)
	return x.webProduct("web", v)
}

// breakProduct edits the Product web of a working delivery; the deadline runs from here.
func (x *check) breakProduct(edit func(*v1.Product)) {
	x.t.Helper()
	x.broke()
	x.editProduct("web", edit)
}

// orderKeeps checks, after a failed render of a working Order, that nothing new was made and
// what ran still runs.
func (x *check) orderKeeps(r running) {
	x.t.Helper()
	if preps := x.preparations("web"); len(preps) != 1 || preps[0] != r.preparation {
		x.t.Errorf("Preparations %v after the failure, want only %s", preps, r.preparation)
	}
	if o := order(x.ns, "web"); env.Client.Get(x.ctx, client.ObjectKeyFromObject(o), o) == nil && o.Status.LatestPreparation != r.preparation {
		x.t.Errorf("the Order's latest Preparation moved to %s", o.Status.LatestPreparation)
	}
	x.stillRuns(r)
}

// credentialsCase registers a Cluster of a working member whose credentials Secret holds data.
func (x *check) credentialsCase(data map[string][]byte) {
	x.t.Helper()
	m := newMember()
	x.putSecret(cfg.Namespace, x.ns, corev1.SecretTypeOpaque, data)
	x.broke()
	x.clusterAt(x.ns, m.URL(), nil)
	x.sees(clusterNamed(x.ns))
}

// argoCDSecret reads the Argo CD cluster Secret of a Cluster.
func (x *check) argoCDSecret(clusterName string) *corev1.Secret {
	x.t.Helper()
	var s corev1.Secret
	x.must(env.Client.Get(x.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: cluster.SecretName(clusterName)}, &s))
	return &s
}

// clusterHeld waits, by the deadline, for the Serving to hold cluster with reason, and checks
// that what ran still runs there.
func (x *check) clusterHeld(r running, clusterName, reason string) {
	x.t.Helper()
	waitFor(x.t, "the Serving holds "+clusterName, x.start.Add(deadline), func() error {
		s := x.serving(r.serving)
		tg := target(s, clusterName)
		if tg == nil || len(tg.Conditions) == 0 || tg.Conditions[0].Reason != reason {
			return fmt.Errorf("targets %+v", s.Status.Targets)
		}
		return nil
	})
	x.stillRuns(r)
}

// serverDeployedBy waits, by the deadline, until of two Clusters of one server exactly one
// deploys there: first has the Serving's Application, at the revision that ran, and the
// server's only Argo CD cluster Secret, and runs it healthily once Argo CD says so, while other
// has neither and is held ClusterConflict.
func (x *check) serverDeployedBy(r running, first, other string) {
	x.t.Helper()
	app, otherApp := fleet.ApplicationName(x.ns, r.serving, first), fleet.ApplicationName(x.ns, r.serving, other)
	waitFor(x.t, "only "+first+" deploys to the server", x.start.Add(deadline), func() error {
		apps := x.apps(r.serving)
		a, ok := findApp(apps, app)
		if !ok {
			return fmt.Errorf("no Application %s", app)
		}
		if rev, _, _ := unstructured.NestedString(a.Object, "spec", "source", "targetRevision"); rev != r.revision {
			return fmt.Errorf("Application %s at revision %q, want %s", app, rev, r.revision)
		}
		if _, ok := findApp(apps, otherApp); ok {
			return fmt.Errorf("Application %s of the other Cluster still exists", otherApp)
		}
		tg := target(x.serving(r.serving), other)
		if tg == nil || len(tg.Conditions) == 0 || tg.Conditions[0].Reason != v1.ReasonClusterConflict {
			return fmt.Errorf("the Serving does not hold %s ClusterConflict: targets %+v", other, x.serving(r.serving).Status.Targets)
		}
		var s corev1.Secret
		switch err := env.Client.Get(x.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: cluster.SecretName(other)}, &s); {
		case err == nil:
			return fmt.Errorf("the Argo CD cluster Secret of %s still exists", other)
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("get the Argo CD cluster Secret of %s: %w", other, err)
		}
		return nil
	})
	x.argoCDSecret(first)
	waitFor(x.t, "the Serving healthy on "+first, x.start.Add(deadline), func() error {
		x.playArgoCD(r.serving)
		s := x.serving(r.serving)
		if s.Status.Clusters.Healthy != 1 || target(s, first) != nil {
			return fmt.Errorf("clusters %+v, targets %+v", s.Status.Clusters, s.Status.Targets)
		}
		return nil
	})
}
