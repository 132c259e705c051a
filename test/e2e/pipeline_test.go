//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// A release flows through a two-stage pipeline on the real fleet: staging (edge-1) runs it first,
// edge (every member) takes it once it ran in staging healthily for the soak; the deployment
// record verifies with stock cosign, run exactly as docs/deployment-records.md says, and a
// record altered in the registry fails both cosign and Kokumi.
func TestAReleaseFlowsFromStagingToEdgeWithASignedRecord(t *testing.T) {
	const (
		ns        = "team-pipeline"
		target    = "podinfo-pipeline"
		soak      = 10 * time.Second
		stagingOr = "podinfo-staging"
		edgeOr    = "podinfo-edge"
	)
	ctx := context.Background()
	must(t, fleet.RegisterDemoClusters(ctx, wideMembers...))
	for _, e := range []sandbox.EnvironmentSetup{
		{Name: "staging", Selector: map[string]string{sandbox.StagingLabel: sandbox.DemoStagingEnvironment}},
		{Name: "edge", Requires: []v1.StageRequirement{{Environment: "staging", Soak: &metav1.Duration{Duration: soak}}}},
	} {
		e.Namespace, e.Project, e.TargetNamespaces = ns, "pipeline", []string{target}
		if err := fleet.SetUpEnvironment(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	product := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: demo.ChartURL, Version: demo.ChartVersion}, TargetNamespace: target,
		Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":1}`)}}},
	}}
	must(t, hub.Create(ctx, product))
	for name, environment := range map[string]string{stagingOr: "staging", edgeOr: "edge"} {
		must(t, hub.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
			Promotion: v1.Promotion{Mode: v1.PromotionAutomatic},
		}}))
	}
	t.Cleanup(func() {
		for _, name := range []string{stagingOr, edgeOr} {
			_ = hub.Delete(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
		}
	})

	// edge waits while staging deploys and soaks; the Order says so.
	var sawWaiting string
	var stagingSince, promotedAt time.Time
	eventually(t, settle, "edge promoted after staging's soak", func(ctx context.Context) error {
		var o v1.Order
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: edgeOr}, &o); err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonAwaitingStage {
			sawWaiting = c.Message
		}
		var staging, edge v1.Serving
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: stagingOr}, &staging); err != nil {
			return err
		}
		if c := readyCondition(&staging); c != nil && c.Reason == v1.ReasonDeployed {
			stagingSince = c.LastTransitionTime.Time
		}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: edgeOr}, &edge); err != nil {
			return err
		}
		if edge.Spec.PreparationName == "" {
			return fmt.Errorf("edge not promoted; its Order says %q", sawWaiting)
		}
		promotedAt = time.Now()
		return nil
	})
	if !strings.Contains(sawWaiting, "staging") {
		t.Errorf("the edge Order never said it awaited staging (last: %q)", sawWaiting)
	}
	if stagingSince.IsZero() || promotedAt.Sub(stagingSince) < soak {
		t.Errorf("edge was promoted %s after staging became Deployed (at %s), before the %s soak", promotedAt.Sub(stagingSince), stagingSince, soak)
	}
	t.Logf("staging Deployed at %s; edge promoted %s later; the Order said %q while it waited", stagingSince.Format(time.RFC3339), promotedAt.Sub(stagingSince).Round(100*time.Millisecond), sawWaiting)
	eventually(t, settle, "edge Deployed on every Ready member", func(ctx context.Context) error {
		var s v1.Serving
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: edgeOr}, &s); err != nil {
			return err
		}
		return expectReady(&s, metav1.ConditionTrue, v1.ReasonDeployed, int32(len(edgeMembers())), s.Status.Clusters.Selected-s.Status.Clusters.Held)
	})

	// The record of staging's run verifies with stock cosign, as the docs tell a user to run it.
	var staging v1.Serving
	must(t, hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: stagingOr}, &staging))
	var prep v1.Preparation
	must(t, hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: staging.Spec.PreparationName}, &prep))
	if len(prep.Status.DeploymentRecords) == 0 || prep.Status.DeploymentRecords[0].Environment != "staging" {
		t.Fatalf("staging's Preparation lists records %+v", prep.Status.DeploymentRecords)
	}
	dir := t.TempDir()
	pub := kubectl(t, "-n", sandbox.KokumiNamespace, "get", "configmap", record.ConfigMapName, "-o", `jsonpath={.data.cosign\.pub}`)
	keyFile := filepath.Join(dir, "kokumi.pub")
	must(t, os.WriteFile(keyFile, []byte(pub), 0o600))
	ref := oci.TrimScheme(prep.Spec.Artifact.Ref)
	out, err := cosignVerify(t, dir, keyFile, ref)
	if err != nil || !strings.Contains(out, "The signatures were verified against the specified public key") {
		t.Fatalf("stock cosign refused the deployment record of %s (%v):\n%s", ref, err, out)
	}
	if want := `"clusters":["` + edgeMembers()[0].Name + `"]`; !strings.Contains(payloads(out), want) {
		t.Errorf("the verified record does not name staging's cluster (%s):\n%s", want, payloads(out))
	}

	// Altered in the registry: cosign refuses it, and so does Kokumi.
	repository, digest, _ := strings.Cut(ref, "@")
	// Tampering takes the pusher's credentials: the attacker here holds them.
	recordtest.Tamper(t, asPusher(t)+strings.TrimPrefix(repository, fleet.Registry), digest)
	// Its signature no longer verifies: cosign finds no attestation of the record's type (the
	// render's provenance beside it still verifies, so cosign says that none matched the type).
	if out, err := cosignVerify(t, dir, keyFile, ref); err == nil ||
		!strings.Contains(out, "no matching attestations") && !strings.Contains(out, "none of the attestations matched the predicate type: "+record.PredicateType) {
		t.Errorf("stock cosign accepted a tampered record (%v):\n%s", err, out)
	}
	keys := &record.Keys{Client: hub, Namespace: sandbox.KokumiNamespace}
	trusted, err := keys.Trusted(ctx)
	must(t, err)
	recs, err := (&record.Store{Client: &oci.Client{Credentials: oci.Credentials{fleet.Registry: registryCreds.Puller}}}).Records(ctx, repository, digest, trusted)
	must(t, err)
	for _, r := range recs {
		if r.Verified {
			t.Errorf("Kokumi verified a tampered record: %+v", r)
		}
	}
}

// cosignVerify runs the command of docs/deployment-records.md with stock cosign, with an empty
// home so that nothing of the machine's is read but the docker config that signs in to the
// bundled registry as the puller (as `cosign login` writes it).
func cosignVerify(t *testing.T, home, keyFile, ref string) (string, error) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(registryCreds.Puller.Username + ":" + registryCreds.Puller.Password))
	dockerConfig, _ := json.Marshal(map[string]any{"auths": map[string]any{fleet.Registry: map[string]string{"auth": auth}}})
	must(t, os.MkdirAll(filepath.Join(home, "docker"), 0o700))
	must(t, os.WriteFile(filepath.Join(home, "docker", "config.json"), dockerConfig, 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, assets.Cosign(), "verify-attestation", "--key", keyFile, "--insecure-ignore-tlog",
		"--type", record.PredicateType, "--allow-http-registry", ref)
	cmd.Env = append(os.Environ(), "HOME="+home, "TUF_ROOT="+filepath.Join(home, "tuf"), "DOCKER_CONFIG="+filepath.Join(home, "docker"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// payloads decodes the statements of the envelopes cosign printed, one a line.
func payloads(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		var env struct {
			Payload []byte `json:"payload"`
		}
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &env) == nil {
			b.Write(env.Payload)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

// asPusher serves, on loopback, a proxy of the bundled registry that signs every request in as
// the pusher, for clients that take no credentials (recordtest); it returns its host:port.
func asPusher(t *testing.T) string {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: fleet.Registry}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		// The registry's upload locations name the proxy, so that the client goes on through it.
		r.Out.Host = r.In.Host
		r.Out.SetBasicAuth(registryCreds.Pusher.Username, registryCreds.Pusher.Password)
	}}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}
