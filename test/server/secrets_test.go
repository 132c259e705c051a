package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// Kubernetes' view role leaves Secrets out; the manifests and the diff of a Preparation must
// not hand them to a viewer.

const (
	// dbSecretYAML is a Secret the chart renders into the target namespace, with a password it
	// generated (%s, base64) and a token.
	dbSecretYAML = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{\"data\":{\"password\":\"%[1]s\"}}'\n" +
		"data:\n  password: %[1]s\nstringData:\n  token: %[2]s\n"
	// tlsSecretYAML is a Secret the chart renders into another namespace.
	tlsSecretYAML = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls\n  namespace: team-secrets-certs\ndata:\n  tls.key: a2V5LW9mLWNlcnRz\n"
)

// saUser is the user name of the ServiceAccount ns/name.
func saUser(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// waitUntilAllowed waits until RBAC lets user do verb on resource in ns: a new RoleBinding
// takes a moment to count.
func waitUntilAllowed(t *testing.T, user, verb, resource, ns string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource},
		}}
		must(t, env.Client.Create(context.Background(), review))
		if review.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RBAC never let %s %s %s in %s", user, verb, resource, ns)
		}
		time.Sleep(pollStep)
	}
}

func TestAViewerReadsNoSecretThroughTheManifestsOrTheDiff(t *testing.T) {
	ctx := context.Background()
	ns, target, certs := "team-secrets", "podinfo", "team-secrets-certs"
	for _, n := range []string{ns, target, certs} {
		must(t, env.CreateNamespace(ctx, n))
	}
	reg := ocitest.Start(t)
	repository := reg.Addr + "/" + ns + "/web"
	// web-2 rotates the password the chart generated; the token stays.
	oldPassword, newPassword, apiToken := "b2xkLXBhc3N3b3Jk", "bmV3LXBhc3N3b3Jk", "tok-3f9a2c"
	m1 := fmt.Sprintf(configMapYAML, "settings", "blue") + "---\n" + fmt.Sprintf(dbSecretYAML, oldPassword, apiToken) + "---\n" + tlsSecretYAML
	m2 := fmt.Sprintf(configMapYAML, "settings", "green") + "---\n" + fmt.Sprintf(dbSecretYAML, newPassword, apiToken) + "---\n" + tlsSecretYAML
	artifactPrep(t, ns, "web-1", "web", repository, pushManifests(t, repository, m1), "6.1.0", nil)
	artifactPrep(t, ns, "web-2", "web", repository, pushManifests(t, repository, m2), "6.2.0", nil)
	manifests := "/api/v1/namespaces/" + ns + "/preparations/web-2/manifests"
	diff := "/api/v1/namespaces/" + ns + "/preparations/web-2/diff?against=web-1"
	secretOf := func(objs []server.ManifestObject, name string) string {
		for _, o := range objs {
			if o.Kind == "Secret" && o.Name == name {
				return o.YAML
			}
		}
		t.Fatalf("no Secret %s among %+v", name, objs)
		return ""
	}
	diffOf := func(objs []server.ObjectDiff, kind, name string) string {
		for _, o := range objs {
			if o.Kind == kind && o.Name == name {
				return o.Diff
			}
		}
		t.Fatalf("no %s %s among %+v", kind, name, objs)
		return ""
	}
	leaks := func(what, text string) {
		t.Helper()
		for _, secret := range []string{oldPassword, newPassword, apiToken, "a2V5LW9mLWNlcnRz"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the Secret value %q:\n%s", what, secret, text)
			}
		}
	}

	// A viewer of the namespace (kubectl auth can-i get secrets: no) sees the keys, not the
	// values, and is told which Secrets are masked.
	viewer := serviceAccountToken(t, ns, "viewer")
	bindClusterRole(t, ns, "view", ns, "viewer")
	m := getAs(t, call{server: k8sBase, path: manifests, bearer: viewer}, func(server.PreparationManifests) error { return nil })
	if fmt.Sprint(m.Redacted) != "[Secret/podinfo/db Secret/team-secrets-certs/tls]" ||
		m.RedactedNote != "values of 2 Secrets hidden: you may not get secrets in namespaces podinfo, team-secrets-certs" {
		t.Errorf("a viewer's manifests name %v as redacted (%q), want both Secrets", m.Redacted, m.RedactedNote)
	}
	db := secretOf(m.Objects, "db")
	leaks("the viewer's manifests", db+secretOf(m.Objects, "tls"))
	for _, line := range []string{"  password: ++++++++\n", "  token: ++++++++\n", "kubectl.kubernetes.io/last-applied-configuration: ++++++++\n"} {
		if !strings.Contains(db, line) {
			t.Errorf("the viewer's Secret db lacks %q:\n%s", line, db)
		}
	}
	if cm := m.Objects[0]; cm.Kind != "ConfigMap" || !strings.Contains(cm.YAML, "color: green") {
		t.Errorf("the ConfigMap is masked too: %+v", cm)
	}
	d := getAs(t, call{server: k8sBase, path: diff, bearer: viewer}, func(server.PreparationDiff) error { return nil })
	if fmt.Sprint(d.Redacted) != "[Secret/podinfo/db Secret/team-secrets-certs/tls]" || d.RedactedNote == "" {
		t.Errorf("a viewer's diff names %v as redacted (%q)", d.Redacted, d.RedactedNote)
	}
	if len(d.Objects) != 2 {
		t.Errorf("a viewer's diff: %+v, want the ConfigMap and the Secret db changed", d.Objects)
	}
	dbDiff := diffOf(d.Objects, "Secret", "db")
	leaks("the viewer's diff", dbDiff)
	if !strings.Contains(dbDiff, "-  password: ++++++++\n+  password: +++++++++\n") || !strings.Contains(dbDiff, "   token: ++++++++\n") {
		t.Errorf("the viewer's diff of Secret db does not show that the password changed and the token did not:\n%s", dbDiff)
	}

	// Whoever may get Secrets in the target namespace sees its values; not those of a Secret
	// the chart puts in another namespace.
	reader := serviceAccountToken(t, ns, "secret-reader")
	bindClusterRole(t, ns, "view", ns, "secret-reader")
	must(t, env.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "team-secrets-get-secrets"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}))
	bindClusterRole(t, target, "team-secrets-get-secrets", ns, "secret-reader")
	waitUntilAllowed(t, saUser(ns, "secret-reader"), "get", "secrets", target)
	m = getAs(t, call{server: k8sBase, path: manifests, bearer: reader}, func(server.PreparationManifests) error { return nil })
	if fmt.Sprint(m.Redacted) != "[Secret/team-secrets-certs/tls]" || m.RedactedNote != "values of 1 Secret hidden: you may not get secrets in namespace team-secrets-certs" {
		t.Errorf("a reader of podinfo's Secrets: %v (%q), want only the Secret of %s", m.Redacted, m.RedactedNote, certs)
	}
	if db := secretOf(m.Objects, "db"); !strings.Contains(db, "password: "+newPassword) || !strings.Contains(db, "token: "+apiToken) {
		t.Errorf("a reader of podinfo's Secrets does not see them:\n%s", db)
	}
	leaks("the reader's Secret tls", secretOf(m.Objects, "tls"))
	d = getAs(t, call{server: k8sBase, path: diff, bearer: reader}, func(server.PreparationDiff) error { return nil })
	if dbDiff := diffOf(d.Objects, "Secret", "db"); !strings.Contains(dbDiff, "-  password: "+oldPassword+"\n+  password: "+newPassword+"\n") {
		t.Errorf("a reader of podinfo's Secrets does not see the rotation:\n%s", dbDiff)
	}

	// The admin sees everything, and the answer says nothing is masked.
	var raw map[string]any
	if res := do(t, call{path: manifests, bearer: token}, &raw); res.StatusCode != http.StatusOK || fmt.Sprint(raw["redacted"]) != "[]" || raw["redactedNote"] != nil ||
		!strings.Contains(fmt.Sprint(raw["objects"]), "a2V5LW9mLWNlcnRz") {
		t.Errorf("the admin's manifests: %d redacted %v, note %v", res.StatusCode, raw["redacted"], raw["redactedNote"])
	}
}
