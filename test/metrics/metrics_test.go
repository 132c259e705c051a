package metrics

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// Only those the API server authenticates, and authorizes to get /metrics, read the metrics.
func TestOnlyAMetricsReaderScrapes(t *testing.T) {
	ctx := context.Background()

	code, _, err := scrape("")
	must(t, err)
	if code != http.StatusUnauthorized {
		t.Errorf("without a token: HTTP %d, want 401", code)
	}
	// The TokenReview says the token is invalid; controller-runtime's filter answers that with
	// 500 "Authentication failed" rather than 401. Either way, nothing is served.
	code, body, err := scrape("not-a-token-the-api-server-issued")
	must(t, err)
	if (code != http.StatusUnauthorized && code != http.StatusInternalServerError) || strings.Contains(body, "kokumi_") {
		t.Errorf("with a made-up token: HTTP %d, want 401 or 500: %.200s", code, body)
	}
	stranger, err := harness.IssueToken(ctx, env.Config, "monitoring", "stranger")
	must(t, err)
	code, body, err = scrape(stranger)
	must(t, err)
	if code != http.StatusForbidden || strings.Contains(body, "kokumi_") {
		t.Errorf("a ServiceAccount without kokumi-metrics-reader: HTTP %d, want 403: %.200s", code, body)
	}
	// Nor does the controller's own ServiceAccount read them.
	controllerToken, err := harness.IssueToken(ctx, env.Config, harness.ControllerNamespace, harness.ControllerServiceAccount)
	must(t, err)
	if code, _, err := scrape(controllerToken); err != nil || code != http.StatusForbidden {
		t.Errorf("the controller's ServiceAccount: HTTP %d, %v; want 403", code, err)
	}

	reader := readerToken(t)
	// The controllers' own series appear once they start, after the caches sync (a work queue's
	// depth only once something was queued).
	eventually(t, "Kokumi's and controller-runtime's metrics served", func() error {
		e := scrapeAs(t, reader)
		for _, family := range []string{"kokumi_cluster_probe_seconds", "kokumi_order_render_seconds", "kokumi_application_write_seconds",
			"kokumi_deployment_records_signed_total", "controller_runtime_reconcile_total", "workqueue_adds_total"} {
			if _, ok := e.types[family]; !ok {
				return fmt.Errorf("the scrape lacks %s", family)
			}
		}
		return nil
	})

	// Plain HTTP gets nothing.
	plain := strings.Replace(metricsURL, "https://", "http://", 1)
	if resp, err := http.Get(plain); err == nil { //nolint:noctx // a test
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP scrape: HTTP %d", resp.StatusCode)
		}
	}
}

// --pprof-bind-address serves Go's heap profile on its own address, and the metrics' port does
// not serve profiles.
func TestProfilesAreServedOnTheirOwnAddress(t *testing.T) {
	resp, err := http.Get(pprofURL + "heap") //nolint:noctx // a test
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	// A heap profile is a gzipped protocol buffer.
	if resp.StatusCode != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Errorf("GET %sheap: HTTP %d, %d bytes; want a gzipped profile", pprofURL, resp.StatusCode, len(body))
	}
	code, body2, err := scrapePath(strings.TrimSuffix(metricsURL, "/metrics")+"/debug/pprof/heap", readerToken(t))
	must(t, err)
	if code == http.StatusOK {
		t.Errorf("the metrics' port serves profiles too: HTTP %d, %d bytes", code, len(body2))
	}
}

// A Cluster's readiness and its probes show, and its series goes with it.
func TestClustersReportReadinessAndProbes(t *testing.T) {
	token := readerToken(t)
	before := scrapeAs(t, token)
	up := startMember(t)
	createCluster(t, "metrics-up", up.srv.URL, up.credentials(), nil)
	down := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "metrics-down"}}
	createCluster(t, down.Name, unreachable(t), up.credentials(), nil)

	metricEquals(t, token, `kokumi_cluster_ready{cluster="metrics-up"}`, 1)
	metricEquals(t, token, `kokumi_cluster_ready{cluster="metrics-down"}`, 0)
	after := scrapeAs(t, token)
	for _, result := range []string{"success", "failure"} {
		series := fmt.Sprintf(`kokumi_cluster_probe_seconds_count{result="%s"}`, result)
		if after.series[series] <= before.series[series] {
			t.Errorf("%s: %v before, %v after", series, before.series[series], after.series[series])
		}
	}

	deleteAndWait(t, down)
	metricGone(t, token, `kokumi_cluster_ready{cluster="metrics-down"}`)
	metricEquals(t, token, `kokumi_cluster_ready{cluster="metrics-up"}`, 1)
}

// A Serving's cluster counts follow its status, its Application writes and deployment records
// are counted, an Order's failed render is counted; the Serving's series go with it.
func TestAServingReportsItsClusters(t *testing.T) {
	ctx := context.Background()
	token := readerToken(t)
	const ns, tier, project = "team-metrics", "metrics-serving", "metrics-edge"
	must(t, env.CreateNamespace(ctx, ns))
	before := scrapeAs(t, token)

	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{ns}, "sourceRepos": []any{"*"},
		"destinations": []any{map[string]any{"server": "*", "namespace": "*"}},
	}}}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(project)
	p.SetNamespace(cfg.ArgoCDNamespace)
	must(t, env.Client.Create(ctx, p))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}}, Project: project}}))
	up := startMember(t)
	createCluster(t, "serving-up", up.srv.URL, up.credentials(), map[string]string{"tier": tier})
	createCluster(t, "serving-down", unreachable(t), up.credentials(), map[string]string{"tier": tier})

	// The Product's source does not answer: the Order's render fails.
	must(t, env.Client.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://" + strings.TrimPrefix(unreachable(t), "https://") + "/charts/podinfo", Version: "6.14.1"}}}))
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	// A Preparation made by hand, as if rendered, and promoted.
	repository := registry.Addr + "/" + ns + "/podinfo"
	digest, err := (&oci.Client{}).PushArtifact(ctx, repository, []byte("podinfo"), nil)
	must(t, err)
	must(t, env.Client.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-1", Namespace: ns}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digest},
		TargetNamespace: "podinfo", Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest}, ConfigHash: "1",
	}}))
	serving := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo"}, PreparationName: "podinfo-1", PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(ctx, serving))

	series := func(state string) string {
		return fmt.Sprintf(`kokumi_serving_clusters{namespace="%s",serving="podinfo",state="%s"}`, ns, state)
	}
	counts := func(want v1.ClusterCounts) {
		t.Helper()
		eventually(t, fmt.Sprintf("the Serving's series say %+v", want), func() error {
			e := scrapeAs(t, token)
			var got []string
			for state, n := range map[string]int32{"selected": want.Selected, "healthy": want.Healthy, "progressing": want.Progressing, "degraded": want.Degraded, "held": want.Held} {
				if v, ok := e.value(series(state)); !ok || v != float64(n) {
					got = append(got, fmt.Sprintf("%s=%v (present %v), want %d", state, v, ok, n))
				}
			}
			if len(got) > 0 {
				return fmt.Errorf("%s", strings.Join(got, "; "))
			}
			return nil
		})
		// They are the status' counts, which the reconcile writes after it sets the series.
		eventually(t, fmt.Sprintf("status.clusters says %+v", want), func() error {
			must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(serving), serving))
			if serving.Status.Clusters != want {
				return fmt.Errorf("status.clusters %+v, the metrics %+v", serving.Status.Clusters, want)
			}
			return nil
		})
	}

	// The Cluster that answers gets an Application, Progressing; the other is held.
	counts(v1.ClusterCounts{Selected: 2, Progressing: 1, Held: 1})
	// The cache of Argo CD's namespace holds it.
	cachedBefore, _ := before.value(kmetrics.ApplicationsCachedName)
	metricEquals(t, token, kmetrics.ApplicationsCachedName, cachedBefore+1)
	ready := fmt.Sprintf(`kokumi_serving_ready{namespace="%s",serving="podinfo"}`, ns)
	metricEquals(t, token, ready, 0)
	metricEquals(t, token, fmt.Sprintf(`kokumi_promotions_waiting{kind="serving",namespace="%s",serving="podinfo"}`, ns), 0)
	metricEquals(t, token, fmt.Sprintf(`kokumi_promotions_waiting{kind="order",namespace="%s",serving="podinfo"}`, ns), 0)

	// Argo CD reports it synced and healthy: Deployed (to one cluster, the other held), and a
	// deployment record is signed.
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: fleet.ApplicationName(ns, "podinfo", "serving-up")}, app))
	app.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": "Synced", "revision": digest},
		"health": map[string]any{"status": "Healthy"},
	}
	must(t, env.Client.Update(ctx, app))
	counts(v1.ClusterCounts{Selected: 2, Healthy: 1, Held: 1})
	metricEquals(t, token, ready, 1)
	eventually(t, "a deployment record signed", func() error {
		e := scrapeAs(t, token)
		if got, was := e.series["kokumi_deployment_records_signed_total"], before.series["kokumi_deployment_records_signed_total"]; got <= was {
			return fmt.Errorf("kokumi_deployment_records_signed_total %v, was %v", got, was)
		}
		return nil
	})
	// It is the Order's first deployment in edge: the delivery measures count it, labelled by
	// Environment and Order, with every series of the pair at zero beside it (no provenance of
	// this hand-made Preparation: no lead time is observed).
	dora := fmt.Sprintf(`{environment="edge",order="%s/podinfo"}`, ns)
	metricEquals(t, token, kmetrics.DeploymentsName+dora, 1)
	metricEquals(t, token, kmetrics.LeadTimeName+"_count"+dora, 0)
	metricEquals(t, token, kmetrics.TimeToRestoreName+"_count"+dora, 0)
	metricEquals(t, token, fmt.Sprintf(`%s{environment="edge",kind="halted",order="%s/podinfo"}`, kmetrics.ChangeFailuresName, ns), 0)

	// Degraded: Argo CD says so.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(app), app))
	app.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": "Synced", "revision": digest},
		"health": map[string]any{"status": "Degraded", "message": "crash loop"},
	}
	must(t, env.Client.Update(ctx, app))
	counts(v1.ClusterCounts{Selected: 2, Degraded: 1, Held: 1})
	metricEquals(t, token, ready, 0)

	after := scrapeAs(t, token)
	for _, s := range []string{`kokumi_application_write_seconds_count{result="success"}`, `kokumi_order_render_seconds_count{result="failure"}`} {
		if after.series[s] <= before.series[s] {
			t.Errorf("%s: %v before, %v after", s, before.series[s], after.series[s])
		}
	}

	// The Serving goes, and its series with it.
	deleteAndWait(t, serving)
	metricEquals(t, token, kmetrics.ApplicationsCachedName, cachedBefore)
	metricGone(t, token, fmt.Sprintf(`kokumi_serving_clusters{namespace="%s",serving="podinfo"`, ns))
	metricGone(t, token, fmt.Sprintf(`kokumi_serving_ready{namespace="%s",serving="podinfo"`, ns))
}

// metricName finds the names of Kokumi's and controller-runtime's metrics in a PromQL
// expression.
var metricName = regexp.MustCompile(`\b(?:kokumi|controller_runtime|workqueue)_[a-zA-Z0-9_]+\b`)

// Every metric the dashboard and the alerts name is one the manager serves, and every metric
// of Kokumi's is documented.
func TestTheDashboardAndAlertsNameOnlyServedMetrics(t *testing.T) {
	ctx := context.Background()
	token := readerToken(t)
	// One object of each kind whose series exist only with it: a Serving (of no Order), a
	// Cluster (without credentials).
	const ns = "team-metrics-names"
	must(t, env.CreateNamespace(ctx, ns))
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "names", Namespace: ns}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "names"}}}
	must(t, env.Client.Create(ctx, s))
	t.Cleanup(func() { deleteAndWait(t, s) })
	createCluster(t, "metrics-names", unreachable(t), nil, nil)
	// An Environment whose signed webhook's key is not in Kokumi's namespace, then is.
	environment := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "names", Namespace: ns}, Spec: v1.EnvironmentSpec{Project: "names",
		Notifications: []v1.Notification{{Name: "chat", URL: "https://hooks.example.com/", SecretRef: &v1.SecretKeyRef{Name: "metrics-names", Key: "chat"}}}}}
	must(t, env.Client.Create(ctx, environment))
	t.Cleanup(func() { deleteAndWait(t, environment) })
	keysMissing := fmt.Sprintf(`kokumi_environment_webhook_keys_missing{environment="names",namespace="%s"}`, ns)
	metricEquals(t, token, keysMissing, 1)
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "metrics-names", Namespace: cfg.Namespace},
		Data: map[string][]byte{"chat": []byte("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32)))}}
	must(t, env.Client.Create(ctx, key))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, key) })
	metricEquals(t, token, keysMissing, 0)
	metricEquals(t, token, `kokumi_cluster_ready{cluster="metrics-names"}`, 0)
	metricEquals(t, token, fmt.Sprintf(`kokumi_serving_ready{namespace="%s",serving="names"}`, ns), 0)
	metricEquals(t, token, fmt.Sprintf(`kokumi_promotions_waiting{kind="serving",namespace="%s",serving="names"}`, ns), 0)
	// The delivery measures' series exist once evidence is signed (TestAServingReportsItsClusters
	// signs a record through the controller); one deployment is counted here, so that their
	// names are served whichever test ran first.
	kmetrics.Deployed("names", ns, "names", 0, false, time.Now())
	e := scrapeAs(t, token)

	served := func(e exposition, name string) bool {
		if _, ok := e.types[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && (e.types[base] == "histogram" || (suffix != "_bucket" && e.types[base] == "summary")) {
				return true
			}
		}
		return false
	}
	root := env.Assets.Root
	exprs := map[string][]string{}
	dashboard, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "dashboard.json"))
	must(t, err)
	var d any
	must(t, json.Unmarshal(dashboard, &d))
	exprs["dashboard.json"] = queries(d)
	rules, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "prometheusrule.yaml"))
	must(t, err)
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	must(t, yaml.Unmarshal(rules, &rule))
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			exprs["prometheusrule.yaml"] = append(exprs["prometheusrule.yaml"], r.Expr)
			alerts++
		}
	}
	if alerts < 8 || len(exprs["dashboard.json"]) < 15 {
		t.Errorf("read %d alerts and %d dashboard queries: fewer than shipped", alerts, len(exprs["dashboard.json"]))
	}
	named := map[string]string{} // name: where, in which expression
	for file, list := range exprs {
		for _, expr := range list {
			for _, name := range metricName.FindAllString(expr, -1) {
				named[name] = fmt.Sprintf("config/prometheus/%s: %s", file, expr)
			}
		}
	}
	// A controller's series appear once it starts: wait for every name before failing.
	eventually(t, "every metric config/prometheus names is served", func() error {
		e = scrapeAs(t, token)
		var missing []string
		for name, where := range named {
			if !served(e, name) {
				missing = append(missing, fmt.Sprintf("%s (named in %s)", name, where))
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			return fmt.Errorf("the manager does not serve:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})
	// Each of Kokumi's metrics is on the dashboard or in an alert, and documented.
	docs, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	must(t, err)
	var families []string
	for name := range e.types {
		if strings.HasPrefix(name, "kokumi_") {
			families = append(families, name)
		}
	}
	sort.Strings(families)
	if len(families) < 8 {
		t.Errorf("the manager serves %d of Kokumi's metrics: %v", len(families), families)
	}
	for _, name := range families {
		if !strings.Contains(string(docs), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not document %s", name)
		}
		onDashboard := false
		for n := range named {
			if n == name || strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum") == name {
				onDashboard = true
			}
		}
		if !onDashboard {
			t.Errorf("%s is on neither the dashboard nor an alert", name)
		}
	}
}

// queries collects the PromQL of a Grafana dashboard: every target's expr and every
// variable's query.
func queries(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
				out = append(out, s)
				continue
			}
			out = append(out, queries(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, queries(x)...)
		}
	}
	return out
}
