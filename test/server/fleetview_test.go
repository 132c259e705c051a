package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// fleetEnvironment is the Environment name both tenants of the fleet view's tests use: it
// selects the Clusters labelled env=fleetview.
const fleetEnvironment = "fleetview"

// prepDigest is the digest preparationOf gives the Preparation name.
func prepDigest(name string) string { return "sha256:" + fmt.Sprintf("%064x", []byte(name))[:64] }

// fleetTenant sets up namespace ns delivering the Order order to the Environment fleetview: its
// Serving deploys prep, which runs healthily on fleet-a; its status says fleet-c drifted.
func fleetTenant(t *testing.T, ns, order, prep string) {
	t.Helper()
	ctx := context.Background()
	must(t, env.CreateNamespace(ctx, ns))
	environment(t, ns, fleetEnvironment)
	preparationOf(t, ns, prep, order, true)
	sv := orderAndServing(t, ns, order, fleetEnvironment, prep)
	sv.Status.Revision = prepDigest(prep)
	sv.Status.Targets = []v1.Target{{Cluster: "fleet-c", Revision: prepDigest(prep), Conditions: []v1.TargetCondition{
		{Type: fleet.Drifted.String(), Reason: "OutOfSync", Message: "Deployment/" + order + " was changed on the cluster"},
	}}}
	must(t, env.Client.Status().Update(ctx, sv))
	app(t, ns, order, "fleet-a", "Healthy", "Synced", prepDigest(prep), "", time.Now().Add(-time.Hour))
}

// fleetCells says a page's cells as cluster:state/preparation, column by column.
func fleetCells(p view.FleetPage) string {
	var rows []string
	for _, r := range p.Rows {
		var cells []string
		for _, c := range r.Cells {
			if c == nil {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, c.State+"/"+c.Preparation)
		}
		rows = append(rows, r.Cluster+":"+strings.Join(cells, ","))
	}
	return strings.Join(rows, " ")
}

func TestTheFleetViewShowsWhatEveryClusterRunsAndOnlyToWhoMayReadIt(t *testing.T) {
	ctx := context.Background()
	const mine, theirs = "team-fleet-mine", "team-fleet-theirs"
	for _, name := range []string{"fleet-a", "fleet-b", "fleet-c"} {
		region := "eu"
		if name == "fleet-b" {
			region = "us"
		}
		c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": fleetEnvironment, "region": region}},
			Spec: v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}}}
		must(t, env.Client.Create(ctx, c))
		setClusterReady(t, c, metav1.ConditionTrue, v1.ReasonConnected)
	}
	fleetTenant(t, theirs, "web", "web-secret-2")
	tenant := serviceAccountToken(t, mine, "tenant")
	bindClusterRole(t, mine, "edit", mine, "tenant")
	fleetTenant(t, mine, "api", "api-1")

	// The admin reads their Environment's fleet: fleet-a runs the target, fleet-b has nothing
	// yet, fleet-c drifted.
	theirFleet := "/api/v1/namespaces/" + theirs + "/environments/" + fleetEnvironment + "/fleet"
	p := get(t, theirFleet, func(p view.FleetPage) error {
		if got := fleetCells(p); got != "fleet-a:Healthy/web-secret-2 fleet-b:Progressing/ fleet-c:Drifted/web-secret-2" {
			return fmt.Errorf("cells %s", got)
		}
		return nil
	})
	if len(p.Columns) != 1 || p.Columns[0].Order != "web" || p.Columns[0].Preparation != "web-secret-2" || !p.Rows[0].Cells[0].Target {
		t.Errorf("columns %+v, fleet-a's cell %+v", p.Columns, p.Rows[0].Cells[0])
	}
	if p.Counts["Drifted"] != 1 || p.Counts["Healthy"] != 1 || p.Counts["Progressing"] != 1 || p.Rows[2].Cells[0].Reason != "OutOfSync" {
		t.Errorf("counts %v, fleet-c %+v", p.Counts, p.Rows[2].Cells[0])
	}
	// Filters and pages.
	p = get(t, theirFleet+"?state=Drifted", func(p view.FleetPage) error { return nil })
	if fleetCells(p) != "fleet-c:Drifted/web-secret-2" || p.RowsTotal != 1 {
		t.Errorf("state=Drifted: %s", fleetCells(p))
	}
	p = get(t, theirFleet+"?selector=region%3Dus", func(p view.FleetPage) error { return nil })
	if fleetCells(p) != "fleet-b:Progressing/" {
		t.Errorf("selector region=us: %s", fleetCells(p))
	}
	p = get(t, theirFleet+"?limit=2", func(p view.FleetPage) error { return nil })
	if len(p.Rows) != 2 || p.Next != "fleet-b" || p.RowsOmitted != 1 {
		t.Errorf("limit=2: %s, next %q", fleetCells(p), p.Next)
	}
	p = get(t, theirFleet+"?limit=2&after="+p.Next, func(p view.FleetPage) error { return nil })
	if fleetCells(p) != "fleet-c:Drifted/web-secret-2" || p.Next != "" {
		t.Errorf("after fleet-b: %s", fleetCells(p))
	}
	var refusal map[string]string
	if code := status(t, call{path: theirFleet + "?state=Broken", bearer: token}, &refusal); code != http.StatusBadRequest || !strings.Contains(refusal["error"], "use one of Held") {
		t.Errorf("state=Broken: %d %v", code, refusal)
	}
	// Every Environment the admin may read: both tenants' Orders.
	all := get(t, "/api/v1/fleet", func(p view.FleetPage) error {
		if len(p.Columns) < 2 {
			return fmt.Errorf("columns %+v", p.Columns)
		}
		return nil
	})
	if !strings.Contains(fmt.Sprint(all.Environments), theirs+"/"+fleetEnvironment) || !strings.Contains(fmt.Sprint(all.Environments), mine+"/"+fleetEnvironment) {
		t.Errorf("environments %v", all.Environments)
	}

	// The tenant with edit in its own namespace and a valid token asks for the other tenant's
	// fleet, every way the API offers, and learns nothing of it: neither its cells nor its
	// Preparations' names.
	cookie := login(t, k8sBase, tenant)
	as := call{server: k8sBase, cookie: cookie}
	for _, path := range []string{theirFleet, theirFleet + "?order=web", "/api/v1/fleet", "/api/v1/fleet?namespace=" + theirs, "/api/v1/fleet?order=" + theirs + "/web"} {
		var body json.RawMessage
		code := status(t, as.at(http.MethodGet, path, nil), &body)
		if code != http.StatusOK && code != http.StatusForbidden {
			t.Errorf("%s: status %d", path, code)
		}
		for _, secret := range []string{"web-secret", `"web"`, "Drifted/web", theirs + "/"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("%s answers the tenant %d with the other tenant's %q: %s", path, code, secret, body)
			}
		}
	}
	if code := status(t, as.at(http.MethodGet, theirFleet, nil), &refusal); code != http.StatusForbidden || !strings.Contains(refusal["error"], "may not list environments") {
		t.Errorf("their Environment: %d %v", code, refusal)
	}
	// Its own fleet it reads whole.
	own := getAs(t, as.at(http.MethodGet, "/api/v1/fleet", nil), func(p view.FleetPage) error {
		if fleetCells(p) != "fleet-a:Healthy/api-1 fleet-b:Progressing/ fleet-c:Drifted/api-1" {
			return fmt.Errorf("cells %s", fleetCells(p))
		}
		return nil
	})
	if fmt.Sprint(own.Environments) != "["+mine+"/"+fleetEnvironment+"]" || len(own.Columns) != 1 || own.Columns[0].Namespace != mine {
		t.Errorf("the tenant's fleet: environments %v, columns %+v", own.Environments, own.Columns)
	}
}
