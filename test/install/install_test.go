// Package install tests what docs/install.md installs: the Helm chart (charts/kokumi) and the
// kustomization (config/default), rendered and applied with server-side dry run to a real API
// server whose Pod Security admission enforces the restricted standard on Kokumi's namespace.
package install

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/dev/chart"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) { harness.Main(m, &env) }

// restricted labels a namespace for the restricted Pod Security Standard in every mode.
var restricted = map[string]string{
	"pod-security.kubernetes.io/enforce": "restricted",
	"pod-security.kubernetes.io/warn":    "restricted",
	"pod-security.kubernetes.io/audit":   "restricted",
}

// newDryRunner makes kokumi-system (labelled restricted) and argocd, and a dry runner as admin.
func newDryRunner(t *testing.T) *chart.DryRunner {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"kokumi-system", "argocd"} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	var ns corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kokumi-system"}, &ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range restricted {
		ns.Labels[k] = v
	}
	if err := env.Client.Patch(ctx, &ns, patch); err != nil {
		t.Fatal(err)
	}
	d, err := chart.NewDryRunner(env.Config, env.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// installDryRun applies every object in dry run, Namespaces for real first (namespaced objects
// need theirs), and fails the test on any error or Pod Security warning; every workload's Pod
// is created in dry run too.
func installDryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report := newDryRunner(t).Install(ctx, objs)
	for _, f := range report.Findings {
		t.Errorf("%s: refused: %v; warnings: %q", f.Object, f.Err, f.Warnings)
	}
	if report.Pods != 3 {
		t.Errorf("%d workloads, want 3 (controller, registry, server)", report.Pods)
	}
}

// kustomization renders config/default as `kubectl kustomize` does.
func kustomization(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	out, err := env.Kubectl(context.Background(), "kustomize", filepath.Join(repoRoot(t), "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestChartInstallsWithServerSideDryRunUnderRestricted(t *testing.T) {
	newDryRunner(t) // the namespaces, kokumi-system labelled restricted
	ctx := context.Background()
	// What `make chart-dry-run` runs.
	report, err := chart.DryRunInstall(ctx, env.Config, packageChart(t, "v1.2.3"), "kokumi", "kokumi-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range report.Findings {
		t.Errorf("%s: refused: %v; warnings: %q", f.Object, f.Err, f.Warnings)
	}
	if report.Pods != 3 || report.Objects < 30 {
		t.Errorf("%d objects and %d workload Pods installed in dry run, want 30+ and 3", report.Objects, report.Pods)
	}

	// A namespace that does not enforce restricted is a finding, naming the fix.
	if err := env.CreateNamespace(ctx, "kokumi-lax"); err != nil {
		t.Fatal(err)
	}
	report, err = chart.DryRunInstall(ctx, env.Config, packageChart(t, "v1.2.3"), "kokumi", "kokumi-lax", nil)
	if err != nil {
		t.Fatal(err)
	}
	if report.OK() || !strings.Contains(fmt.Sprint(report.Findings), "kubectl label namespace kokumi-lax pod-security.kubernetes.io/enforce=restricted") {
		t.Errorf("an install into a namespace that does not enforce restricted passed: %+v", report.Findings)
	}
}

func TestKustomizationInstallsWithServerSideDryRunUnderRestricted(t *testing.T) {
	var objs []*unstructured.Unstructured
	for _, o := range kustomization(t) {
		if o.GetKind() != "Namespace" { // created for real by the dry runner, labels checked below
			objs = append(objs, o)
		}
	}
	installDryRun(t, objs)
	ns := find(kustomization(t), "Namespace", "", "kokumi-system")
	if ns == nil || ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("config/default's Namespace kokumi-system does not enforce the restricted Pod Security Standard: %v", ns)
	}
}

// The check above fails for a Pod that breaks the restricted standard: Pod Security admission
// runs on this API server.
func TestPodSecurityAdmissionRefusesAPodThatIsNotRestricted(t *testing.T) {
	objs, err := renderChart(t, packageChart(t, "v1.2.3"), map[string]any{
		"securityContext": map[string]any{"allowPrivilegeEscalation": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := newDryRunner(t)
	ctx := context.Background()
	deploy := find(objs, "Deployment", "kokumi-system", "kokumi-controller")
	warns, err := d.Apply(ctx, deploy)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, "PodSecurity") }) {
		t.Errorf("no Pod Security warning for a Deployment allowing privilege escalation: %q", warns)
	}
	err = d.CreatePodOf(ctx, deploy)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("a Pod allowing privilege escalation was not refused by Pod Security admission: %v", err)
	}
}

func TestChartDefaultsRunTwoLeaderElectedControllersWithADisruptionBudget(t *testing.T) {
	objs, err := renderChart(t, packageChart(t, "v1.2.3"), nil)
	if err != nil {
		t.Fatal(err)
	}
	deploy := find(objs, "Deployment", "kokumi-system", "kokumi-controller")
	if deploy == nil {
		t.Fatalf("no controller Deployment in %v", keys(objs))
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "replicas"); fmt.Sprint(r) != "2" {
		t.Errorf("controller replicas = %v, want 2", r)
	}
	c := container(t, deploy)
	if !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("controller args %q lack --leader-elect", c.Args)
	}
	if c.Image != "ghcr.io/kokumi-dev/kokumi:v1.2.3" {
		t.Errorf("image = %s, want the chart's appVersion as its tag", c.Image)
	}
	pdb := find(objs, "PodDisruptionBudget", "kokumi-system", "kokumi-controller")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget for the controller")
	}
	if m, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); fmt.Sprint(m) != "1" {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", m)
	}
}

func TestChartValuesChangeWhatTheySay(t *testing.T) {
	archive := packageChart(t, "v1.2.3")
	objs, err := renderChart(t, archive, map[string]any{
		"image":      map[string]any{"repository": "registry.example.com/kokumi", "digest": "sha256:" + strings.Repeat("a", 64)},
		"argocd":     map[string]any{"namespace": "gitops"},
		"controller": map[string]any{"replicas": 1, "localProject": "hub", "extraArgs": []any{"--application-writers=32"}},
		"registry":   map[string]any{"enabled": false},
		"server":     map[string]any{"enabled": false},
		"crds":       map[string]any{"install": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := container(t, find(objs, "Deployment", "kokumi-system", "kokumi-controller"))
	if want := "registry.example.com/kokumi@sha256:" + strings.Repeat("a", 64); c.Image != want {
		t.Errorf("image = %s, want %s (the digest wins over the tag)", c.Image, want)
	}
	for _, want := range []string{"--argocd-namespace=gitops", "--local-project=hub", "--application-writers=32"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("controller args %q lack %s", c.Args, want)
		}
	}
	for _, arg := range c.Args {
		if strings.HasPrefix(arg, "--bundled-registry") {
			t.Errorf("controller has %s with the registry off", arg)
		}
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "CustomResourceDefinition":
			t.Errorf("crds.install=false still renders %s", key(o))
		case o.GetNamespace() == "argocd":
			t.Errorf("%s stays in argocd with argocd.namespace=gitops", key(o))
		case strings.Contains(o.GetName(), "registry"), strings.Contains(o.GetName(), "server"):
			t.Errorf("%s is rendered though its component is off", key(o))
		case o.GetKind() == "PodDisruptionBudget":
			t.Errorf("a PodDisruptionBudget for one replica blocks node drains: %s", key(o))
		}
	}
	if find(objs, "Role", "gitops", "kokumi-controller") == nil || find(objs, "RoleBinding", "gitops", "kokumi-controller") == nil {
		t.Errorf("the controller's Role and RoleBinding are not in gitops: %v", keys(objs))
	}

	_, err = renderChart(t, archive, map[string]any{"controller": map[string]any{"leaderElection": false}})
	if err == nil || !strings.Contains(err.Error(), "controller.leaderElection") {
		t.Errorf("two replicas without leader election rendered, or the error does not name the value: %v", err)
	}

	objs, err = renderChart(t, archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	crd := find(objs, "CustomResourceDefinition", "", "orders.delivery.kokumi.dev")
	if crd == nil || crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRDs are not kept when the release is uninstalled: %v", crd)
	}
	np := find(objs, "NetworkPolicy", "kokumi-system", "kokumi-registry")
	if np == nil {
		t.Fatal("no NetworkPolicy for the bundled registry")
	}
}

// controller.fleetSize sizes the controller's memory limit and GOMEMLIMIT for a fleet larger
// than the defaults hold, and keeps a larger limit that was given.
func TestChartSizesTheControllersMemoryForItsFleet(t *testing.T) {
	archive := packageChart(t, "v1.2.3")
	for _, tc := range []struct {
		name              string
		controller        map[string]any
		limit, goMemLimit string
	}{
		{"the defaults hold 1,000 Clusters", nil, "1Gi", "900MiB"},
		{"1,000 Clusters", map[string]any{"fleetSize": 1000}, "1Gi", "900MiB"},
		{"10,000 Clusters", map[string]any{"fleetSize": 10000}, "2176Mi", "1958MiB"},
		{"3,500 Clusters", map[string]any{"fleetSize": 3500}, "1344Mi", "1209MiB"},
		{"a larger limit given is kept", map[string]any{"fleetSize": 10000, "resources": map[string]any{"limits": map[string]any{"memory": "4Gi"}}}, "4Gi", "3686MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.controller != nil {
				values["controller"] = tc.controller
			}
			objs, err := renderChart(t, archive, values)
			if err != nil {
				t.Fatal(err)
			}
			c := container(t, find(objs, "Deployment", "kokumi-system", "kokumi-controller"))
			if got := c.Resources.Limits.Memory().String(); got != tc.limit {
				t.Errorf("memory limit %s, want %s", got, tc.limit)
			}
			var goMemLimit string
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					goMemLimit = e.Value
				}
			}
			if goMemLimit != tc.goMemLimit {
				t.Errorf("GOMEMLIMIT %q, want %q", goMemLimit, tc.goMemLimit)
			}
			if got := c.Resources.Requests.Memory().String(); got != "128Mi" {
				t.Errorf("memory request %s, want the values' 128Mi", got)
			}
		})
	}
}

// The chart and the kustomization install the same objects with the same rights and the same
// containers, so that neither drifts from the other.
func TestChartAndKustomizationInstallTheSame(t *testing.T) {
	chartObjs, err := renderChart(t, packageChart(t, "latest"), nil)
	if err != nil {
		t.Fatal(err)
	}
	kustObjs := kustomization(t)
	var chartKeys, kustKeys []string
	for _, o := range chartObjs {
		chartKeys = append(chartKeys, key(o))
	}
	for _, o := range kustObjs {
		if o.GetKind() != "Namespace" { // Helm installs into a namespace it is given
			kustKeys = append(kustKeys, key(o))
		}
	}
	sort.Strings(chartKeys)
	sort.Strings(kustKeys)
	if !slices.Equal(chartKeys, kustKeys) {
		t.Errorf("the chart installs\n%s\nand config/default\n%s", strings.Join(chartKeys, "\n"), strings.Join(kustKeys, "\n"))
	}
	for _, k := range kustObjs {
		c := find(chartObjs, k.GetKind(), k.GetNamespace(), k.GetName())
		if c == nil {
			continue
		}
		for _, field := range [][]string{{"rules"}, {"roleRef"}, {"subjects"}, {"spec", "versions"}, {"spec", "ingress"}, {"spec", "ports"}} {
			a, _, _ := unstructured.NestedFieldNoCopy(k.Object, field...)
			b, _, _ := unstructured.NestedFieldNoCopy(c.Object, field...)
			if !jsonEqual(a, b) {
				t.Errorf("%s: %s differs: config/default has %v, the chart %v", key(k), strings.Join(field, "."), a, b)
			}
		}
		if k.GetKind() == "Deployment" {
			kc, cc := container(t, k), container(t, c)
			if !slices.Equal(kc.Args, cc.Args) || kc.Image != cc.Image || !jsonEqual(kc.SecurityContext, cc.SecurityContext) || !jsonEqual(kc.Resources, cc.Resources) || !jsonEqual(kc.Env, cc.Env) {
				t.Errorf("%s: the containers differ:\nconfig/default %+v\nthe chart      %+v", key(k), kc, cc)
			}
			for _, field := range [][]string{{"spec", "replicas"}, {"spec", "template", "spec", "securityContext"}, {"spec", "template", "spec", "volumes"}} {
				a, _, _ := unstructured.NestedFieldNoCopy(k.Object, field...)
				b, _, _ := unstructured.NestedFieldNoCopy(c.Object, field...)
				if !jsonEqual(a, b) {
					t.Errorf("%s: %s differs: config/default has %v, the chart %v", key(k), strings.Join(field, "."), a, b)
				}
			}
		}
	}
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// container is the first container of a workload's Pod template.
func container(t *testing.T, workload *unstructured.Unstructured) corev1.Container {
	t.Helper()
	if workload == nil {
		t.Fatal("no such workload")
	}
	var pt corev1.PodTemplateSpec
	tmpl, _, _ := unstructured.NestedMap(workload.Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pt); err != nil {
		t.Fatalf("%s: %v", key(workload), err)
	}
	if len(pt.Spec.Containers) == 0 {
		t.Fatalf("%s has no container", key(workload))
	}
	return pt.Spec.Containers[0]
}
