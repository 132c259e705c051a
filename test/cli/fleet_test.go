package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cli"
)

// fleetOfTwoOrders sets up the Environment prod of ns over three Clusters (ns-a, ns-b in us,
// ns-c): the Order web rolls out web-2 (ns-a runs it, ns-b waits in its wave running web-1,
// ns-c drifted), the Order api deploys api-1 (ns-a runs it).
func fleetOfTwoOrders(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}}, Project: "prod",
	}}))
	for _, c := range []struct{ name, region string }{{ns + "-a", "eu"}, {ns + "-b", "us"}, {ns + "-c", "eu"}} {
		cl := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{"fleet": ns, "region": c.region}},
			Spec: v1.ClusterSpec{Server: "https://" + c.name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: c.name}}}
		must(t, env.Client.Create(ctx, cl))
		apimeta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "probed"})
		must(t, env.Client.Status().Update(ctx, cl))
	}
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("1")})
	preparation(t, ns, "web-2", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("2")})
	web := serving(t, ns, "web", "web-2")
	web.Status = v1.ServingStatus{Revision: digest("2"), Targets: []v1.Target{
		{Cluster: ns + "-b", Revision: digest("1"), Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: v1.ReasonWaiting, Message: "wave rest has not started"}}},
		{Cluster: ns + "-c", Revision: digest("2"), Conditions: []v1.TargetCondition{{Type: "Drifted", Reason: "OutOfSync", Message: "Deployment/web was changed on the cluster"}}},
	}}
	must(t, env.Client.Status().Update(ctx, web))
	since := time.Now().Add(-time.Hour)
	application(t, ns, "web", ns+"-a", "Healthy", "Synced", digest("2"), "", since)
	application(t, ns, "web", ns+"-b", "Healthy", "Synced", digest("1"), "", since)
	application(t, ns, "web", ns+"-c", "Healthy", "OutOfSync", digest("2"), "", since)
	order(t, ns, "api", "prod", v1.PromotionManual)
	preparation(t, ns, "api-1", prepSpec{order: "api", ready: metav1.ConditionTrue, digest: digest("3")})
	api := serving(t, ns, "api", "api-1")
	api.Status = v1.ServingStatus{Revision: digest("3")}
	must(t, env.Client.Status().Update(ctx, api))
	application(t, ns, "api", ns+"-a", "Healthy", "Synced", digest("3"), "", since)
}

func TestFleetShowsWhatEveryClusterRunsOfEachOrder(t *testing.T) {
	ns := namespace(t, "fleet")
	fleetOfTwoOrders(t, ns)

	r := kubectlKokumi(t, "fleet", "prod", "-n", ns)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "Environment fleet/prod: 3 clusters, 2 Orders. Cells: Held 0, Degraded 0, Drifted 1, Waiting 1, Progressing 2, Healthy 2\n") {
		t.Errorf("the summary line:\n%s", r.stdout)
	}
	// A release marked * is not the Serving's; the age is the Preparation's (created just now).
	table := rows(r.stdout, "CLUSTER")
	want := [][]string{
		{"CLUSTER", "API", "WEB"},
		{ns + "-a", "Healthy api-1 (0s)", "Healthy web-2 (0s)"},
		{ns + "-b", "Progressing", "Waiting web-1* (0s)"},
		{ns + "-c", "Progressing", "Drifted web-2 (0s)"},
	}
	for i := range table {
		for j := range table[i] {
			table[i][j] = regexp.MustCompile(`\(\d+s\)`).ReplaceAllString(table[i][j], "(0s)")
		}
	}
	if !equalRows(table, want) {
		t.Errorf("table %q, want %q", table, want)
	}

	// Filters and pages, as the UI's.
	r = kubectlKokumi(t, "fleet", "prod", "-n", ns, "--state", "Drifted", "--order", "web")
	if table := rows(r.stdout, "CLUSTER"); r.code != 0 || len(table) != 2 || table[1][0] != ns+"-c" || len(table[1]) != 2 {
		t.Errorf("--state Drifted --order web: exit %d, table %q", r.code, table)
	}
	r = kubectlKokumi(t, "fleet", "prod", "-n", ns, "-l", "region=eu", "--limit", "1")
	if table := rows(r.stdout, "CLUSTER"); r.code != 0 || table[1][0] != ns+"-a" ||
		!strings.HasSuffix(r.stdout, "\n\nShowing 1 of 2 clusters: add --after "+ns+"-a for the next page.\n") {
		t.Errorf("-l region=eu --limit 1: exit %d, stdout: %q", r.code, r.stdout)
	}
	r = kubectlKokumi(t, "fleet", "prod", "-n", ns, "--state", "Held")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "No cluster has a cell in state Held: leave out --state to see them all.\n") {
		t.Errorf("--state Held: exit %d, stdout:\n%s", r.code, r.stdout)
	}

	// -o json is the API's page, for scripts.
	r = kubectlKokumi(t, "fleet", "prod", "-n", ns, "-o", "json")
	var f cli.Fleet
	must(t, json.Unmarshal([]byte(r.stdout), &f))
	if r.code != 0 || len(f.Rows) != 3 || len(f.Columns) != 2 || f.Rows[2].Cells[1].State != "Drifted" || f.Rows[2].Cells[1].Reason != "OutOfSync" ||
		f.Rows[1].Cells[1].Preparation != "web-1" || f.Rows[1].Cells[1].Target || f.Counts["Waiting"] != 1 {
		t.Errorf("exit %d, json %+v", r.code, f)
	}
}

func TestFleetErrorsNameTheFix(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "fleet-errors")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet"}, "error: missing ENVIRONMENT: usage: kubectl kokumi fleet ENVIRONMENT (see --help)\n"},
		{[]string{"fleet", "prod", "-n", ns}, "error: Environment prod not found in namespace " + ns + ": list them with kubectl get environments -n " + ns + ", or in every namespace with kubectl get environments -A\n"},
		{[]string{"fleet", "prod", "--state", "Sad"}, `error: state "Sad" is not a state of the fleet view: use one of Held, Degraded, Drifted, Waiting, Progressing, Healthy (see --help)` + "\n"},
		{[]string{"fleet", "prod", "-l", "region==="}, `error: selector "region===" does not parse`},
		{[]string{"fleet", "prod", "--limit", "5000"}, "error: limit 5000 is not a whole number from 1 to 1000 (see --help)\n"},
		{[]string{"fleet", "prod", "-o", "wide"}, `error: unknown output format "wide": use one of json, yaml` + "\n"},
	} {
		r := kubectlKokumi(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r := kubectlKokumi(t, "fleet", "--help")
	for _, want := range []string{"kubectl kokumi fleet prod -n shop", "Drifted      it no longer runs what was deployed", "--selector", "--after"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("the help does not say %q:\n%s", want, r.stdout)
		}
	}

	// A viewer of the namespace may not list the Clusters: the error says what to ask for.
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}}, Project: "prod",
	}}))
	kubeconfig := viewerKubeconfig(t, ns, "fleet-viewer")
	r = kubectlKokumi(t, "fleet", "prod", "--kubeconfig", kubeconfig)
	want := "error: you may not list Clusters: the fleet view needs `list clusters.delivery.kokumi.dev` (cluster-wide)"
	if r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "Fleet page") {
		t.Errorf("as a viewer: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
}

// viewerKubeconfig writes the kubeconfig of a new user bound to the role view in ns, and returns
// its path.
func viewerKubeconfig(t *testing.T, ns, user string) string {
	t.Helper()
	cfg, err := env.AddUser(user)
	must(t, err)
	must(t, env.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}))
	kubeconfig := t.TempDir() + "/" + user + ".kubeconfig"
	must(t, writeKubeconfig(kubeconfig, cfg, ns))
	return kubeconfig
}
