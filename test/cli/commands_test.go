package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cli"
	"github.com/kokumi-dev/kokumi/internal/version"
)

func TestHelpOfEveryCommandExitsZeroWithExamples(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"status", "--help"}, {"promote", "--help"}, {"rollback", "--help"},
		{"history", "--help"}, {"diff", "--help"}, {"help", "diff"}, {"version", "--help"}, {"plan", "--help"},
	} {
		r := kubectlKokumi(t, args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%v: exit %d, stderr %q, want 0 and nothing", args, r.code, r.stderr)
		}
		for _, want := range []string{"Usage:", "Examples:", "kubectl kokumi", "--kubeconfig", "--namespace"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v: the help does not say %q:\n%s", args, want, r.stdout)
			}
		}
	}
	// Wrong use exits 1 and says what is wrong.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"promote", "web"}, "error: missing PREPARATION: usage: kubectl kokumi promote SERVING PREPARATION (see --help)"},
		{[]string{"status"}, "error: missing SERVING: usage: kubectl kokumi status SERVING (see --help)"},
		{[]string{"status", "web", "-o", "xml"}, `error: unknown output format "xml": use one of wide, json, yaml`},
		{[]string{"deploy"}, `error: unknown command "deploy" for "kubectl kokumi"`},
		{[]string{"version", "now"}, "error: too many arguments (now): usage: kubectl kokumi version (see --help)"},
	} {
		r := kubectlKokumi(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func TestVersionPrintsTheVersionAndCommitItWasBuiltWith(t *testing.T) {
	oldVersion, oldCommit := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldVersion, oldCommit })
	version.Version, version.Commit = "v1.2.3", "0123456789ab"
	// No cluster is reached: a kubeconfig that names none does not matter.
	r := kubectlKokumi(t, "version", "--kubeconfig", t.TempDir()+"/none")
	want := "kubectl-kokumi v1.2.3 (commit 0123456789ab, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("version: exit %d, stdout %q, stderr %q, want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
}

func TestAMissingServingSaysHowToListThem(t *testing.T) {
	ns := namespace(t, "shop")
	r := kubectlKokumi(t, "status", "web", "-n", ns)
	want := "error: Serving web not found in namespace shop: list them with kubectl get servings -n shop, or in every namespace with kubectl get servings -A\n"
	if r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Errorf("exit %d, stderr %q, want 1 and %q", r.code, r.stderr, want)
	}
	// The namespace of the kubeconfig's context counts as kubectl's does.
	r = kubectlKokumi(t, "history", "web")
	want = "error: Order web not found in namespace default: list them with kubectl get orders -n default, or in every namespace with kubectl get orders -A\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want 1 and %q", r.code, r.stderr, want)
	}
}

// fleetServing creates a Serving of three clusters as the Serving reconciler would leave it:
// east held (its Cluster is not Ready), west degraded, north healthy; Argo CD's Applications
// exist for west and north.
func fleetServing(t *testing.T, ns string) *v1.Serving {
	t.Helper()
	ctx := context.Background()
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("1")})
	s := serving(t, ns, "web", "web-1")
	heldSince := metav1.NewTime(time.Now().Add(-5 * time.Hour).Truncate(time.Second))
	s.Status = v1.ServingStatus{
		Revision: digest("1"),
		Clusters: v1.ClusterCounts{Selected: 3, Healthy: 1, Degraded: 1, Held: 1},
		Targets: []v1.Target{
			{Cluster: "east", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "Cluster east is not Ready: Unreachable"}}, Since: heldSince},
			{Cluster: "west", Application: ns + "-web-west", Revision: digest("1"), Conditions: []v1.TargetCondition{{Type: "Degraded", Reason: v1.ReasonDegraded, Message: "Deployment podinfo: crash loop"}}, Since: heldSince},
		},
	}
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeploymentFailed, Message: "1 of 3 clusters degraded"})
	must(t, env.Client.Status().Update(ctx, s))
	since := time.Now().Add(-30 * time.Minute) // past 10 minutes, HumanDuration shows minutes alone: "30m" for a while
	application(t, ns, "web", "west", "Degraded", "Synced", digest("1"), "crash loop", since)
	application(t, ns, "web", "north", "Healthy", "Synced", digest("1"), "", since)
	return s
}

func TestStatusShowsTheCountsAndTheUIsClusterTable(t *testing.T) {
	ns := namespace(t, "status")
	fleetServing(t, ns)

	r := kubectlKokumi(t, "status", "web", "-n", ns)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"Serving:      status/web\n", "Order:        web\n", "Preparation:  web-1\n", "Revision:     " + digest("1") + "\n",
		"Ready:        False (DeploymentFailed): 1 of 3 clusters degraded\n",
		"Clusters:     Selected 3, Healthy 1, Progressing 0, Degraded 1, Held 1\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q", want)
		}
	}
	// The held cluster first, then the degraded one, then the healthy one, as the UI lists them.
	table := rows(r.stdout, "CLUSTER")
	want := [][]string{
		{"CLUSTER", "STATE", "REASON", "MESSAGE"},
		{"east", "Held", "ClusterNotReady", "Cluster east is not Ready: Unreachable"},
		{"west", "Degraded", "Degraded", "Deployment podinfo: crash loop"},
		{"north", "Healthy", "-", "-"},
	}
	if !equalRows(table, want) {
		t.Errorf("table %q, want %q", table, want)
	}

	// -o wide adds each cluster's Application, its health and sync status as Argo CD reports
	// them, the revision and since when.
	r = kubectlKokumi(t, "status", "web", "-n", ns, "-o", "wide")
	table = rows(r.stdout, "CLUSTER")
	want = [][]string{
		{"CLUSTER", "STATE", "REASON", "APPLICATION", "HEALTH", "SYNC", "REVISION", "SINCE", "MESSAGE"},
		{"east", "Held", "ClusterNotReady", "-", "-", "-", "-", "5h", "Cluster east is not Ready: Unreachable"},
		{"west", "Degraded", "Degraded", ns + "-web-west", "Degraded", "Synced", strings.Repeat("1", 12), "5h", "Deployment podinfo: crash loop"},
		{"north", "Healthy", "-", ns + "-web-north", "Healthy", "Synced", strings.Repeat("1", 12), "30m", "-"},
	}
	if r.code != 0 || !equalRows(table, want) {
		t.Errorf("exit %d, wide table %q, want %q", r.code, table, want)
	}

	// -o json is the same, for scripts.
	r = kubectlKokumi(t, "status", "web", "-n", ns, "-o", "json")
	var st cli.Status
	must(t, json.Unmarshal([]byte(r.stdout), &st))
	if r.code != 0 || st.Preparation != "web-1" || st.Clusters.Held != 1 || len(st.Rows) != 3 || st.Rows[0].Cluster != "east" ||
		st.Rows[0].Reason != v1.ReasonClusterNotReady || st.Rows[2].Application != ns+"-web-north" || st.Ready.Reason != v1.ReasonDeploymentFailed {
		t.Errorf("exit %d, json %+v", r.code, st)
	}
	r = kubectlKokumi(t, "status", "web", "-n", ns, "-o", "yaml")
	if r.code != 0 || !strings.Contains(r.stdout, "cluster: east\n") || !strings.Contains(r.stdout, "preparation: web-1\n") {
		t.Errorf("exit %d, yaml:\n%s", r.code, r.stdout)
	}
}

func TestStatusSaysWhyTheTableIsEmptyForWhoMayNotListApplications(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "status-viewer")
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("1")})
	s := serving(t, ns, "web", "web-1")
	// One cluster, healthy: the Serving's status names no cluster (it names those not healthy),
	// and its Argo CD Application is the only row of the table.
	s.Status = v1.ServingStatus{Revision: digest("1"), Clusters: v1.ClusterCounts{Selected: 1, Healthy: 1}}
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonDeployed, Message: "1 of 1 clusters healthy"})
	must(t, env.Client.Status().Update(ctx, s))
	application(t, ns, "web", "north", "Healthy", "Synced", digest("1"), "", time.Now().Add(-30*time.Minute))

	// Who may list the Applications sees the healthy cluster.
	r := kubectlKokumi(t, "status", "web", "-n", ns)
	if table := rows(r.stdout, "CLUSTER"); r.code != 0 || len(table) != 2 || table[1][0] != "north" || table[1][1] != "Healthy" {
		t.Fatalf("status as the admin: exit %d, table %q", r.code, table)
	}

	cfg, err := env.AddUser("status-viewer")
	must(t, err)
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "status-viewer-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "status-viewer"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}))
	kubeconfig := t.TempDir() + "/viewer.kubeconfig"
	must(t, writeKubeconfig(kubeconfig, cfg, ns))

	// A viewer of the namespace may not list Argo CD's Applications: the counts are there, and
	// the table's absence is explained, not "No clusters to show".
	r = kubectlKokumi(t, "status", "web", "--kubeconfig", kubeconfig)
	want := "Clusters:     Selected 1, Healthy 1, Progressing 0, Degraded 0, Held 0\n\n" +
		"You may not list Applications in argocd: the table of clusters needs `list applications.argoproj.io` in namespace argocd (ask an admin of argocd for it).\n" +
		"Without the Applications the table can list only the clusters the Serving's status names (those not healthy), and it names none.\n"
	if r.code != 0 || !strings.HasSuffix(r.stdout, want) || strings.Contains(r.stdout, "No clusters to show") || r.stderr != "" {
		t.Errorf("status as a viewer: exit %d, stdout:\n%s\nwant it to end with:\n%s", r.code, r.stdout, want)
	}
	// -o json says it too, for scripts.
	r = kubectlKokumi(t, "status", "web", "-o", "json", "--kubeconfig", kubeconfig)
	var st cli.Status
	must(t, json.Unmarshal([]byte(r.stdout), &st))
	if st.Clusters.Healthy != 1 || len(st.Rows) != 0 || !strings.Contains(st.ApplicationsError, "list applications.argoproj.io") {
		t.Errorf("json as a viewer: %+v", st)
	}
}

// rows reads the table that starts at the line beginning with header, cells split on runs of
// two spaces or more.
func rows(out, header string) [][]string {
	var table [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, header) {
			in = true
		}
		if !in || strings.TrimSpace(line) == "" {
			continue
		}
		table = append(table, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
	}
	return table
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "|") != strings.Join(b[i], "|") {
			return false
		}
	}
	return true
}

func TestPromoteMakesTheServersChecksThenPatchesTheServing(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "promote")
	order(t, ns, "web", "prod", v1.PromotionManual)
	serving(t, ns, "web", "")
	preparation(t, ns, "web-ready", prepSpec{order: "web", ready: metav1.ConditionTrue})
	preparation(t, ns, "web-failed", prepSpec{order: "web", ready: metav1.ConditionFalse, reason: v1.ReasonPushFailed})
	preparation(t, ns, "web-unchecked", prepSpec{order: "web"})
	order(t, ns, "api", "prod", v1.PromotionManual)
	preparation(t, ns, "api-ready", prepSpec{order: "api", ready: metav1.ConditionTrue})
	order(t, ns, "auto", "prod", v1.PromotionAutomatic)
	serving(t, ns, "auto", "")
	preparation(t, ns, "auto-ready", prepSpec{order: "auto", ready: metav1.ConditionTrue})

	for _, c := range []struct{ serving, prep, want string }{
		{"web", "web-failed", "error: cannot promote web-failed to Serving promote/web: web-failed is not Ready (PushFailed: as the test says)\n"},
		{"web", "web-unchecked", "error: cannot promote web-unchecked to Serving promote/web: web-unchecked is not Ready (it has not been checked yet)\n"},
		{"web", "api-ready", "error: cannot promote api-ready to Serving promote/web: api-ready belongs to Order api, not web\n"},
		{"web", "web-missing", `error: cannot promote web-missing to Serving promote/web: no Preparation "web-missing" in promote` + "\n"},
		{"auto", "auto-ready", "error: cannot promote auto-ready to Serving promote/auto: Order auto promotes automatically and would undo this: set its spec.promotion.mode to Manual first\n"},
	} {
		r := kubectlKokumi(t, "promote", c.serving, c.prep, "-n", ns)
		if r.code != 1 || r.stderr != c.want {
			t.Errorf("promote %s %s: exit %d, stderr %q, want 1 and %q", c.serving, c.prep, r.code, r.stderr, c.want)
		}
		if got := servingOf(t, ns, c.serving).Spec.PreparationName; got != "" {
			t.Fatalf("a refused promotion changed the Serving: %q", got)
		}
	}

	r := kubectlKokumi(t, "promote", "web", "web-ready", "-n", ns)
	if r.code != 0 || r.stdout != "Promoted web-ready ("+strings.Repeat("a", 12)+") to Serving promote/web (it deployed <none>)\n" {
		t.Errorf("promote: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	sv := servingOf(t, ns, "web")
	if sv.Spec.PreparationName != "web-ready" {
		t.Fatalf("the Serving deploys %q after the promotion, want web-ready", sv.Spec.PreparationName)
	}
	// Its other fields stay: the CLI patches spec.preparationName alone.
	if sv.Spec.OrderRef.Name != "web" {
		t.Errorf("the promotion changed spec.orderRef: %+v", sv.Spec)
	}

	// An Environment that requires staging holds the promotion back, as the Serving would.
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "staging"}, Spec: v1.EnvironmentSpec{Project: "staging"}}))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gated"}, Spec: v1.EnvironmentSpec{
		Project: "gated", Requires: []v1.StageRequirement{{Environment: "staging", Soak: &metav1.Duration{Duration: 30 * time.Minute}}},
	}}))
	order(t, ns, "gated", "gated", v1.PromotionManual)
	serving(t, ns, "gated", "")
	preparation(t, ns, "gated-1", prepSpec{order: "gated", ready: metav1.ConditionTrue})
	r = kubectlKokumi(t, "promote", "gated", "gated-1", "-n", ns)
	want := "error: cannot promote gated-1 to Serving promote/gated: Preparation gated-1 has not passed the stages of Environment gated: staging has not deployed this release\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("promote past a stage: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
	if got := servingOf(t, ns, "gated").Spec.PreparationName; got != "" {
		t.Errorf("a promotion held back by a stage changed the Serving: %q", got)
	}
}

func TestAViewerCannotPromote(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "viewed")
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("2")})
	serving(t, ns, "web", "web-1")

	cfg, err := env.AddUser("viewer")
	must(t, err)
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}))
	kubeconfig := t.TempDir() + "/viewer.kubeconfig"
	must(t, writeKubeconfig(kubeconfig, cfg, ns))

	// The viewer reads: history and status work with their kubeconfig.
	if r := kubectlKokumi(t, "history", "web", "--kubeconfig", kubeconfig); r.code != 0 || !strings.Contains(r.stdout, "web-2") {
		t.Fatalf("history as a viewer: exit %d %q", r.code, r.stderr)
	}
	// Argo CD's namespace is not theirs: status says what the table needs.
	r := kubectlKokumi(t, "status", "web", "--kubeconfig", kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "You may not list Applications in argocd: the table of clusters needs `list applications.argoproj.io` in namespace argocd") {
		t.Errorf("status as a viewer: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// The checks pass; the API server refuses the patch, and the CLI says so.
	r = kubectlKokumi(t, "promote", "web", "web-2", "--kubeconfig", kubeconfig)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: the API server refused to let you patch Serving viewed/web: ") ||
		!strings.Contains(r.stderr, `User "viewer" cannot patch resource "servings"`) || !strings.Contains(r.stderr, "view only reads") {
		t.Errorf("promote as a viewer: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := servingOf(t, ns, "web").Spec.PreparationName; got != "web-1" {
		t.Errorf("a viewer's promotion changed the Serving to %q", got)
	}
	r = kubectlKokumi(t, "rollback", "web", "--to", "web-2", "--kubeconfig", kubeconfig)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: the API server refused to let you patch Serving viewed/web: ") {
		t.Errorf("rollback as a viewer: exit %d, stderr %q", r.code, r.stderr)
	}
}

// lineage creates, a second apart, the Preparations of Order web: web-1 (deployed to prod:
// it has a record), web-2 (deployed, never healthy: no record), web-3 (deployed), web-4 (the
// one the Serving runs, deployed, whose sources were verified), web-5 (newest, never promoted, Ready False).
func lineage(t *testing.T, ns string) {
	t.Helper()
	order(t, ns, "web", "prod", v1.PromotionManual)
	now := time.Now()
	specs := []prepSpec{
		{version: "6.1.0", records: []v1.DeploymentRecord{record(3, now.Add(-72*time.Hour))}, images: []v1.ImagePin{{Original: "a:1", Pinned: "a@" + digest("a")}}},
		{version: "6.2.0"},
		{version: "6.3.0", records: []v1.DeploymentRecord{record(2, now.Add(-24*time.Hour)), record(1, now.Add(-48*time.Hour))}},
		{version: "6.4.0", records: []v1.DeploymentRecord{record(3, now.Add(-time.Hour))},
			provenance: &v1.PreparationProvenance{Digest: digest("e"), KeyID: "00000000000000aa", Sources: v1.SourcesVerified, VerifiedBy: []string{"00000000000000bb"}}},
		{version: "6.5.0", ready: metav1.ConditionFalse, reason: v1.ReasonRenderFailed},
	}
	for i, s := range specs {
		if i > 0 {
			nextSecond()
		}
		s.order = "web"
		if s.ready == "" {
			s.ready = metav1.ConditionTrue
		}
		s.digest = digest(string(rune('1' + i)))
		preparation(t, ns, "web-"+string(rune('1'+i)), s)
	}
	sv := serving(t, ns, "web", "web-4")
	runs(t, sv, "4", nil)
}

// runs sets the Serving's status as the controller does: every one of its 3 clusters runs the
// Preparation of digest(which), and rollout says how its promoted one stands (nil: it is
// deployed, when which is the promoted one's).
func runs(t *testing.T, sv *v1.Serving, which string, rollout *v1.RolloutStatus) {
	t.Helper()
	sv.Status.Running = []v1.RevisionCount{{Revision: digest(which), Clusters: 3}}
	if rollout == nil {
		sv.Status.DeployedRevision = digest(which)
	}
	sv.Status.Rollout = rollout
	must(t, env.Client.Status().Update(context.Background(), sv))
}

func TestHistoryListsTheOrdersPreparationsNewestFirst(t *testing.T) {
	ns := namespace(t, "history")
	lineage(t, ns)
	preparation(t, ns, "other-1", prepSpec{order: "other", ready: metav1.ConditionTrue})

	r := kubectlKokumi(t, "history", "web", "-n", ns)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	table := rows(r.stdout, "NAME")
	if len(table) != 6 || strings.Join(table[0], " ") != "NAME CREATED DIGEST READY VERSION IMAGES RUNNING PROMOTED DEPLOYED CUSTODY" {
		t.Fatalf("table %q, want a header and web's five Preparations", table)
	}
	var names []string
	for _, row := range table[1:] {
		names = append(names, row[0])
	}
	if strings.Join(names, " ") != "web-5 web-4 web-3 web-2 web-1" {
		t.Errorf("order %v, want newest first", names)
	}
	day := func(d time.Duration) string { return time.Now().Add(-d).UTC().Format("2006-01-02") }
	checks := map[string]func(row []string) bool{
		"web-5": func(row []string) bool {
			return row[2] == strings.Repeat("5", 12) && row[3] == "False" && row[4] == "6.5.0" && row[6] == "-" && row[7] == "-" && row[8] == "-"
		},
		"web-4": func(row []string) bool {
			return row[3] == "True" && row[6] == "3 clusters" && row[7] == "deployed" && strings.HasPrefix(row[8], "prod 3 clusters "+day(time.Hour)) && strings.HasSuffix(row[8], " UTC") &&
				row[9] == "sources verified by key 00000000000000bb; provenance signed by key 00000000000000aa"
		},
		"web-3": func(row []string) bool {
			return row[6] == "-" && row[7] == "-" && strings.HasPrefix(row[8], "prod 2 clusters "+day(24*time.Hour)) && strings.Contains(row[8], "; prod 1 cluster "+day(48*time.Hour))
		},
		"web-1": func(row []string) bool {
			return row[5] == "1" && row[4] == "6.1.0" && row[9] == "no provenance: rendered before Kokumi signed one; sources not verified"
		},
	}
	for _, row := range table[1:] {
		if check, ok := checks[row[0]]; ok && (len(row) != 10 || !check(row)) {
			t.Errorf("row %q", row)
		}
		if _, err := time.Parse("2006-01-02 15:04:05 UTC", row[1]); err != nil {
			t.Errorf("created %q: %v", row[1], err)
		}
	}

	r = kubectlKokumi(t, "history", "web", "-n", ns, "-o", "json")
	var entries []cli.HistoryEntry
	must(t, json.Unmarshal([]byte(r.stdout), &entries))
	if len(entries) != 5 || !entries[1].Running || len(entries[2].Deployments) != 2 || entries[2].Deployments[0].Clusters != 2 || entries[4].Images != 1 ||
		entries[1].Provenance == nil || entries[1].Provenance.Sources != v1.SourcesVerified || entries[0].Provenance != nil {
		t.Errorf("json %+v", entries)
	}
}

// RUNNING marks what the clusters run (status.running), not the promoted Preparation: while
// web-4 awaits approval, and after its roll-out was aborted, the clusters run web-3, and
// PROMOTED says how web-4 stands.
func TestHistoryMarksWhatRunsAndHowThePromotedOneStands(t *testing.T) {
	ns := namespace(t, "history-runs")
	lineage(t, ns)
	for _, c := range []struct {
		rollout v1.RolloutStatus
		state   string
	}{
		{v1.RolloutStatus{Preparation: "web-4", From: "web-3", State: v1.RolloutProgressing, Awaiting: v1.EnvironmentGate}, "awaiting approval"},
		{v1.RolloutStatus{Preparation: "web-4", From: "web-3", State: v1.RolloutAborted}, "aborted"},
	} {
		runs(t, servingOf(t, ns, "web"), "3", &c.rollout)
		r := kubectlKokumi(t, "history", "web", "-n", ns)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		got := map[string][]string{}
		for _, row := range rows(r.stdout, "NAME")[1:] {
			got[row[0]] = row
		}
		if row := got["web-3"]; len(row) != 10 || row[6] != "3 clusters" || row[7] != "-" {
			t.Errorf("%s: web-3's row %q, want RUNNING 3 clusters", c.state, row)
		}
		if row := got["web-4"]; len(row) != 10 || row[6] != "-" || row[7] != c.state {
			t.Errorf("%s: web-4's row %q, want RUNNING - and PROMOTED %s", c.state, row, c.state)
		}
	}
}

func TestRollbackPromotesWhatRanBefore(t *testing.T) {
	ns := namespace(t, "rollback")
	lineage(t, ns)

	// web-4 runs; web-3 is the newest older one with a record.
	r := kubectlKokumi(t, "rollback", "web", "-n", ns)
	if r.code != 0 || r.stdout != "Rolled back Serving rollback/web from web-4 to web-3 ("+strings.Repeat("3", 12)+")\n" {
		t.Fatalf("rollback: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := servingOf(t, ns, "web").Spec.PreparationName; got != "web-3" {
		t.Fatalf("the Serving deploys %q, want web-3", got)
	}
	// Again: web-2 never ran healthily (no record), so web-1.
	r = kubectlKokumi(t, "rollback", "web", "-n", ns)
	if r.code != 0 || r.stdout != "Rolled back Serving rollback/web from web-3 to web-1 ("+strings.Repeat("1", 12)+")\n" {
		t.Fatalf("rollback: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Nothing older ran.
	r = kubectlKokumi(t, "rollback", "web", "-n", ns)
	want := "error: cannot roll back Serving rollback/web: no Preparation older than web-1 has a deployment record (none ran healthily before it): name one with --to\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("rollback past the first: exit %d %q, want %q", r.code, r.stderr, want)
	}
	// --to names one; the checks of promote hold (web-5 is not Ready).
	r = kubectlKokumi(t, "rollback", "web", "-n", ns, "--to", "web-5")
	if r.code != 1 || r.stderr != "error: cannot promote web-5 to Serving rollback/web: web-5 is not Ready (RenderFailed: as the test says)\n" {
		t.Errorf("rollback --to web-5: exit %d %q", r.code, r.stderr)
	}
	r = kubectlKokumi(t, "rollback", "web", "-n", ns, "--to", "web-2")
	if r.code != 0 || r.stdout != "Rolled back Serving rollback/web from web-1 to web-2 ("+strings.Repeat("2", 12)+")\n" {
		t.Errorf("rollback --to web-2: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := servingOf(t, ns, "web").Spec.PreparationName; got != "web-2" {
		t.Errorf("the Serving deploys %q, want web-2", got)
	}

	// An Automatic Order would undo it.
	order(t, ns, "auto", "prod", v1.PromotionAutomatic)
	serving(t, ns, "auto", "auto-1")
	r = kubectlKokumi(t, "rollback", "auto", "-n", ns)
	if r.code != 1 || r.stderr != "error: cannot roll back Serving rollback/auto: Order auto promotes automatically and would undo this: set its spec.promotion.mode to Manual first\n" {
		t.Errorf("rollback of an Automatic Order: exit %d %q", r.code, r.stderr)
	}
}

func TestDiffSaysWhatChanges(t *testing.T) {
	ns := namespace(t, "diff")
	podinfo := func(tag, d string) v1.ImagePin {
		return v1.ImagePin{Original: "ghcr.io/stefanprodan/podinfo:" + tag, Pinned: "ghcr.io/stefanprodan/podinfo@" + digest(d)}
	}
	redis := v1.ImagePin{Original: "redis:7", Pinned: "docker.io/library/redis@" + digest("e")}
	preparation(t, ns, "web-1", prepSpec{order: "web", version: "6.1.0", configHash: "h1", values: digest("7"), digest: digest("1"), images: []v1.ImagePin{
		podinfo("6.1.0", "b"), {Original: "busybox:1.36", Pinned: "docker.io/library/busybox@" + digest("c")}, redis,
	}})
	preparation(t, ns, "web-2", prepSpec{order: "web", version: "6.2.0", configHash: "h2", values: digest("8"), targetNamespace: "web", digest: digest("2"), images: []v1.ImagePin{
		podinfo("6.2.0", "f"), redis, {Original: "nginx:1.27", Pinned: "docker.io/library/nginx@" + digest("0")},
	}})
	// The summary first: the new version, that the values changed, the images by change and
	// how to compare the objects; then each image that differs, old → new; then every field.
	r := kubectlKokumi(t, "diff", "web-1", "web-2", "-n", ns)
	want := `Preparation web-1 → web-2

What changes:
  source     6.1.0 → 6.2.0 (oci://ghcr.io/stefanprodan/charts/podinfo)
  values     changed (the Product's Helm values, or whether the chart's CRDs render)
  namespace  podinfo → web
  images     1 changed, 1 added, 1 removed, 1 unchanged
  objects    not compared: a Preparation records no list of its objects; add --manifests to pull both artifacts and diff them object by object

Images:
  - busybox:1.36 (digest cccccccccccc)
  ~ ghcr.io/stefanprodan/podinfo 6.1.0 → 6.2.0 (digest bbbbbbbbbbbb → ffffffffffff)
  + nginx:1.27 (digest 000000000000)

Recorded fields:
  source URL:        oci://ghcr.io/stefanprodan/charts/podinfo (unchanged)
  source version:    6.1.0 → 6.2.0
  source digest:     ` + digest("5") + ` (unchanged)
  target namespace:  podinfo → web
  config hash:       h1 → h2
  values digest:     ` + digest("7") + ` → ` + digest("8") + `
  artifact:          ` + digest("1") + ` → ` + digest("2") + `
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, diff:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}

	// Only the values changed: the summary says so, where the config hashes alone said nothing.
	preparation(t, ns, "web-3", prepSpec{order: "web", version: "6.2.0", configHash: "h3", values: digest("9"), targetNamespace: "web", digest: digest("3"), images: []v1.ImagePin{
		podinfo("6.2.0", "f"), redis, {Original: "nginx:1.27", Pinned: "docker.io/library/nginx@" + digest("0")},
	}})
	r = kubectlKokumi(t, "diff", "web-2", "web-3", "-n", ns)
	summary, _, _ := strings.Cut(r.stdout, "\n\nRecorded fields:")
	want = `Preparation web-2 → web-3

What changes:
  source     unchanged (oci://ghcr.io/stefanprodan/charts/podinfo:6.2.0)
  values     changed (the Product's Helm values, or whether the chart's CRDs render)
  images     unchanged (3)
  objects    not compared: a Preparation records no list of its objects; add --manifests to pull both artifacts and diff them object by object`
	if r.code != 0 || summary != want {
		t.Errorf("exit %d, summary:\n%s\nwant:\n%s", r.code, summary, want)
	}

	// The same tag pinned to another digest, and a Preparation rendered before Kokumi
	// recorded the digest of the values.
	preparation(t, ns, "web-old", prepSpec{order: "web", version: "6.2.0", configHash: "h4", targetNamespace: "web", digest: digest("4"), images: []v1.ImagePin{
		podinfo("6.2.0", "f"), {Original: "redis:7", Pinned: "docker.io/library/redis@" + digest("d")}, {Original: "nginx:1.27", Pinned: "docker.io/library/nginx@" + digest("0")},
	}})
	r = kubectlKokumi(t, "diff", "web-old", "web-3", "-n", ns)
	for _, line := range []string{
		"  values     unknown: web-old was rendered before Kokumi recorded the digest of the values\n",
		"  images     1 changed, 0 added, 0 removed, 2 unchanged\n",
		"  ~ redis 7, pinned to another digest (dddddddddddd → eeeeeeeeeeee)\n",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("diff web-old web-3 does not say %q:\n%s", line, r.stdout)
		}
	}
	r = kubectlKokumi(t, "diff", "web-1", "web-9", "-n", ns)
	if r.code != 1 || r.stderr != "error: Preparation web-9 not found in namespace diff: list them with kubectl get preparations -n diff, or in every namespace with kubectl get preparations -A\n" {
		t.Errorf("diff with a missing Preparation: exit %d %q", r.code, r.stderr)
	}
}

// A Serving rolling out in waves: status prints the roll-out as the controller decided it.
func TestStatusShowsTheRolloutInWaves(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "waves")
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-2", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("2")})
	s := serving(t, ns, "web", "web-2")
	s.Status = v1.ServingStatus{
		Revision: digest("2"),
		Clusters: v1.ClusterCounts{Selected: 5, Healthy: 1, Progressing: 4},
		Rollout: &v1.RolloutStatus{Preparation: "web-2", From: "web-1", State: v1.RolloutProgressing, Wave: "canary",
			Waves: []v1.WaveCount{{Name: "canary", Selected: 1, Healthy: 1}, {Name: "rest", Selected: 4, Waiting: 4}},
			Verifications: []v1.VerificationResult{{Name: "error-rate", Wave: "canary", Kind: "http", Phase: v1.VerificationPassed, Passes: 2, Runs: 2, Completed: 2,
				Message: "successCondition holds; the answer: 200 OK in 3ms: {\"status\":\"success\"}"}},
			Awaiting: "rest"},
	}
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonProgressing, Message: "wave canary soaks"})
	must(t, env.Client.Status().Update(ctx, s))
	r := kubectlKokumi(t, "status", "web", "-n", ns)
	for _, want := range []string{
		"Roll-out:     Progressing web-2, current wave canary, awaiting approval of wave rest (kubectl kokumi approve web -n waves)\n",
		"  wave canary       1 clusters: 1 healthy, 0 progressing, 0 failed, 0 waiting\n",
		"  wave rest         4 clusters: 0 healthy, 0 progressing, 0 failed, 4 waiting\n",
		"  verification error-rate of wave canary (http): Passed, 2 passes in a row, 0 failed of 2 runs: successCondition holds; the answer: 200 OK in 3ms: {\"status\":\"success\"}\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not print %q:\n%s", want, r.stdout)
		}
	}
	r = kubectlKokumi(t, "status", "web", "-n", ns, "-o", "json")
	if !strings.Contains(r.stdout, `"rollout": {`) || !strings.Contains(r.stdout, `"wave": "canary"`) {
		t.Errorf("status -o json lacks the roll-out:\n%s", r.stdout)
	}
}
