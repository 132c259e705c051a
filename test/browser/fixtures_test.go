package browser

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// The scenarios' objects: in teamNS, the Serving web of the Order web (Manual) over the
// Environment edge, whose three Clusters are edge-1 (healthy), edge-2 (degraded) and edge-3
// (held: its Cluster is not Ready); three Preparations of web (web-1 deployed two days ago,
// web-2 deployed now, web-3 Ready and new); the Environment prod; and the Serving fleet with
// fleetSize clusters, for the search, the filter and the pages. emptyNS has no Environment and
// no Product, for the Order form's errors. The Order broken never rendered (SourceNotFound)
// and has no Serving; the Serving gated's Environment requires prod, which has not run its
// Preparation, so its Promote is refused before it is asked. viewerToken is a ServiceAccount of
// teamNS that may read Kokumi's kinds there and change nothing.
const (
	teamNS = "team-web"
	// stagesNS holds a pipeline: prod requires staging, where the Order web-staging runs the
	// chart and images of web-prod's Preparation with other values, Deployed and recorded.
	stagesNS  = "team-stages"
	emptyNS   = "team-empty"
	fleetSize = 1050
	fleetHeld = 7
)

var revision = "sha256:" + strings.Repeat("a", 64)

// viewerToken signs in as the ServiceAccount viewer of teamNS, which may get, list and watch
// Kokumi's kinds in teamNS, and nothing else.
var viewerToken string

// bidiValue is a value of web-3's ConfigMap that holds a RIGHT-TO-LEFT OVERRIDE (U+202E): the
// preview and the diff must flag it.
const bidiValue = "admin\u202Enimda"

// actions are what scenarios.mjs may ask the test to do, by name (startControl).
var actions = map[string]func(context.Context) error{
	// The Serving fleet was Deployed a moment ago, whenever the scenario runs: its "… ago"
	// reads in seconds, and moves by the second.
	"fleet-deployed-now": func(ctx context.Context) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var sv v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "fleet"}, &sv); err != nil {
				return err
			}
			deployed := metav1.NewTime(time.Now().Truncate(time.Second))
			sv.Status.DeployedSince = &deployed
			return env.Client.Status().Update(ctx, &sv)
		})
	},
	// Someone else than the admin promoted gate-2: the admin may approve it.
	"gate-promoted-by-someone-else": func(ctx context.Context) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var sv v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "gate"}, &sv); err != nil {
				return err
			}
			sv.Spec.PromotedBy = "erin"
			return env.Client.Update(ctx, &sv)
		})
	},
	"stop-server":      func(context.Context) error { return gate.Stop() },
	"start-server":     func(context.Context) error { return gate.Start() },
	"runs-reset":       func(ctx context.Context) error { return runsState(ctx, "reset") },
	"runs-aborted":     func(ctx context.Context) error { return runsState(ctx, "aborted") },
	"runs-gate-passed": func(ctx context.Context) error { return runsState(ctx, "gate-passed") },
	// edge-1 degrades: Argo CD reports it, and the Serving counts it.
	"degrade-edge-1": func(ctx context.Context) error {
		if err := setAppHealth(ctx, "edge-1", "Degraded", "Synced", "Deployment web: progress deadline exceeded"); err != nil {
			return err
		}
		return setServingStatus(ctx, true)
	},
	"heal-edge-1": func(ctx context.Context) error {
		if err := setAppHealth(ctx, "edge-1", "Healthy", "Synced", ""); err != nil {
			return err
		}
		return setServingStatus(ctx, false)
	},
	// The Serving reconciler acts on the Serving held's spec.rollout: its status.rollout says
	// Paused, by whom spec.rollout.by names, while it is paused, and Progressing otherwise.
	"held-follows-spec": func(ctx context.Context) error {
		var sv v1.Serving
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "held"}, &sv); err != nil {
			return err
		}
		st := sv.Status.Rollout
		st.State, st.By, st.Message = v1.RolloutProgressing, "", ""
		if c := sv.Spec.Rollout; c != nil && c.Paused {
			st.State, st.By = v1.RolloutPaused, c.By
			st.Message = c.By + " paused the roll-out of Preparation held-2: no further cluster is changed until spec.rollout.paused is false"
		}
		return env.Client.Status().Update(ctx, &sv)
	},
}

func fixtures(ctx context.Context) error {
	c := env.Client
	for _, ns := range []string{teamNS, emptyNS} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	// The Clusters: edge-3 is not Ready.
	for i, ready := range []bool{true, true, false} {
		name := fmt.Sprintf("edge-%d", i+1)
		cl := &v1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "edge", "region": "eu-west"}},
			Spec:       v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}},
		}
		if err := c.Create(ctx, cl); err != nil {
			return err
		}
		cond := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reachable", Message: "the API server answers"}
		if !ready {
			cond = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Unreachable", Message: "dial tcp " + name + ".example:6443: connection refused"}
		}
		cl.Status.Version = "v1.34.1"
		apimeta.SetStatusCondition(&cl.Status.Conditions, cond)
		if err := c.Status().Update(ctx, cl); err != nil {
			return err
		}
	}
	for _, e := range []struct {
		name            string
		clusters, ready int32
	}{{"edge", 3, 2}, {"prod", 4, 4}} {
		env := &v1.Environment{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: e.name},
			Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": e.name}}, Project: e.name},
		}
		if err := c.Create(ctx, env); err != nil {
			return err
		}
		env.Status.Clusters, env.Status.ReadyClusters = e.clusters, e.ready
		apimeta.SetStatusCondition(&env.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "ok"})
		if err := c.Status().Update(ctx, env); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, &v1.Product{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "podinfo"},
		Spec:       v1.ProductSpec{Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.7.0"}},
	}); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "web"},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
			Promotion: v1.Promotion{Mode: v1.PromotionManual}},
	}); err != nil {
		return err
	}
	if err := preparations(ctx); err != nil {
		return err
	}
	if err := brokenAndGated(ctx); err != nil {
		return err
	}
	if err := rollingOut(ctx); err != nil {
		return err
	}
	if err := promotedNotRunning(ctx); err != nil {
		return fmt.Errorf("the Serving runs: %w", err)
	}
	if err := awaitingApproval(ctx); err != nil {
		return fmt.Errorf("the Serving gate: %w", err)
	}
	if err := plannedWaves(ctx); err != nil {
		return fmt.Errorf("the Serving planned: %w", err)
	}
	if err := viewer(ctx); err != nil {
		return err
	}
	if err := stagePassedWithOtherValues(ctx); err != nil {
		return fmt.Errorf("the stage passed with other values: %w", err)
	}
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "web"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "web"}, PreparationName: "web-2",
	}}
	if err := c.Create(ctx, sv); err != nil {
		return err
	}
	if err := setServingStatus(ctx, false); err != nil {
		return err
	}
	now := time.Now()
	for _, a := range []struct{ cluster, health, sync, message string }{
		{"edge-1", "Healthy", "Synced", ""},
		{"edge-2", "Degraded", "Synced", "Deployment web: progress deadline exceeded"},
		{"edge-3", "Healthy", "Synced", ""}, // what Argo CD last reported before edge-3 went away
	} {
		if err := application(ctx, teamNS, "web", a.cluster, a.health, a.sync, a.message, now.Add(-20*time.Minute)); err != nil {
			return err
		}
	}
	if err := fleetView(ctx); err != nil {
		return fmt.Errorf("the Fleet page: %w", err)
	}
	return fleet(ctx)
}

// preparations pushes three artifacts and creates their Preparations, oldest first.
func preparations(ctx context.Context) error {
	push := &oci.Client{}
	for i, p := range []struct {
		name, tag, replicas string
		records             []v1.DeploymentRecord
	}{
		{"web-1", "6.6.0", "2", []v1.DeploymentRecord{{Environment: "edge", Clusters: 3, Time: metav1.NewTime(time.Now().Add(-50 * time.Hour)), Digest: "sha256:" + strings.Repeat("1", 64)}}},
		{"web-2", "6.7.0", "2", []v1.DeploymentRecord{{Environment: "edge", Clusters: 2, Time: metav1.NewTime(time.Now().Add(-90 * time.Minute)), Digest: "sha256:" + strings.Repeat("2", 64)}}},
		{"web-3", "6.8.0", "3", nil},
	} {
		manifests := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: web
spec:
  replicas: %s
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo@sha256:%s
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: web
spec:
  ports:
  - port: 9898
`, p.replicas, strings.Repeat(fmt.Sprint(i+4), 64))
		if p.name != "web-1" {
			// A password the chart generated, another in each release (scenario secrets-hidden).
			manifests += `---
apiVersion: v1
kind: Secret
metadata:
  name: web-db
  namespace: web
data:
  password: ` + base64.StdEncoding.EncodeToString([]byte("s3cr3t-"+p.name)) + `
`
		}
		if p.name == "web-3" {
			manifests += `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-flags
  namespace: web
data:
  newUI: "true"
  owner: "` + bidiValue + `"
`
		}
		layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte(manifests)})
		if err != nil {
			return err
		}
		repo := registry.Addr + "/" + teamNS + "/web"
		digest, err := push.PushArtifact(ctx, repo, layer, map[string]string{"org.opencontainers.image.source": "oci://ghcr.io/stefanprodan/charts/podinfo"})
		if err != nil {
			return fmt.Errorf("push %s: %w", p.name, err)
		}
		prep := &v1.Preparation{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: p.name},
			Spec: v1.PreparationSpec{
				OrderRef: v1.LocalObjectReference{Name: "web"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
				Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: p.tag, Digest: "sha256:" + strings.Repeat(fmt.Sprint(i+7), 64)},
				TargetNamespace: "web",
				Images: []v1.ImagePin{{Original: "ghcr.io/stefanprodan/podinfo:" + p.tag,
					Pinned: "ghcr.io/stefanprodan/podinfo@sha256:" + strings.Repeat(fmt.Sprint(i+4), 64)}},
				Artifact:   v1.Artifact{Ref: "oci://" + repo + "@" + digest, Digest: digest},
				ConfigHash: strings.Repeat(fmt.Sprint(i+1), 16),
			},
		}
		if err := env.Client.Create(ctx, prep); err != nil {
			return fmt.Errorf("create Preparation %s: %w", p.name, err)
		}
		prep.Status.DeploymentRecords = p.records
		apimeta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Built", Message: "pushed"})
		if err := env.Client.Status().Update(ctx, prep); err != nil {
			return fmt.Errorf("Preparation %s's status: %w", p.name, err)
		}
		time.Sleep(1100 * time.Millisecond) // creation times are in seconds: keep them apart
	}
	return nil
}

// brokenAndGated creates the Order broken, which never rendered, and the Order gated with its
// Serving and one Ready Preparation, over the Environment gated, which requires prod.
func brokenAndGated(ctx context.Context) error {
	c := env.Client
	broken := &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "broken"},
		Spec:       v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"}},
	}
	if err := c.Create(ctx, broken); err != nil {
		return err
	}
	apimeta.SetStatusCondition(&broken.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1.ReasonSourceNotFound, Message: "oci://ghcr.io/stefanprodan/charts/podinfo:9.9.9: version 9.9.9 not found"})
	if err := c.Status().Update(ctx, broken); err != nil {
		return err
	}
	gatedEnv := &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gated"},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "gated"}}, Project: "gated",
			Requires: []v1.StageRequirement{{Environment: "prod"}}},
	}
	if err := c.Create(ctx, gatedEnv); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gated"},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "gated"},
			Promotion: v1.Promotion{Mode: v1.PromotionManual}},
	}); err != nil {
		return err
	}
	digest := "sha256:" + strings.Repeat("c", 64)
	prep := &v1.Preparation{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gated-1"},
		Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: "gated"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.8.0", Digest: "sha256:" + strings.Repeat("d", 64)},
			TargetNamespace: "web",
			Images: []v1.ImagePin{{Original: "ghcr.io/stefanprodan/podinfo:6.8.0",
				Pinned: "ghcr.io/stefanprodan/podinfo@sha256:" + strings.Repeat("e", 64)}},
			Artifact:   v1.Artifact{Ref: "oci://" + registry.Addr + "/" + teamNS + "/gated@" + digest, Digest: digest},
			ConfigHash: strings.Repeat("f", 16),
		},
	}
	if err := c.Create(ctx, prep); err != nil {
		return err
	}
	apimeta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Built", Message: "pushed"})
	if err := c.Status().Update(ctx, prep); err != nil {
		return err
	}
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gated"}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "gated"}}}
	if err := c.Create(ctx, sv); err != nil {
		return err
	}
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonNoPreparation, Message: "promote a Preparation"})
	return c.Status().Update(ctx, sv)
}

// stagePassedWithOtherValues makes stagesNS's pipeline: Environment prod requires staging; the
// Order web-staging runs Preparation web-staging-1 there, Deployed, with a signed deployment
// record; web-prod-1 has the same chart and images (source digest, no images) and other values.
func stagePassedWithOtherValues(ctx context.Context) error {
	c := env.Client
	if err := env.CreateNamespace(ctx, stagesNS); err != nil {
		return err
	}
	for _, e := range []struct {
		name     string
		requires []v1.StageRequirement
	}{{"staging", nil}, {"prod", []v1.StageRequirement{{Environment: "staging"}}}} {
		if err := c.Create(ctx, &v1.Environment{
			ObjectMeta: metav1.ObjectMeta{Namespace: stagesNS, Name: e.name},
			Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "stages-" + e.name}}, Project: e.name, Requires: e.requires},
		}); err != nil {
			return err
		}
	}
	source := "sha256:" + strings.Repeat("5", 64)
	prep := func(name, order, configuration, repository, digest string) (*v1.Preparation, error) {
		p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: stagesNS, Name: name}, Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.8.0", Digest: source},
			TargetNamespace: "web", Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
			ConfigHash: name, ConfigurationDigest: configuration,
		}}
		if err := c.Create(ctx, p); err != nil {
			return nil, err
		}
		apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"})
		return p, c.Status().Update(ctx, p)
	}
	orderAndServing := func(name, environment, preparation string) (*v1.Serving, error) {
		if err := c.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: stagesNS, Name: name}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
			Promotion: v1.Promotion{Mode: v1.PromotionManual},
		}}); err != nil {
			return nil, err
		}
		sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: stagesNS, Name: name}, Spec: v1.ServingSpec{
			OrderRef: v1.LocalObjectReference{Name: name}, PreparationName: preparation,
		}}
		return sv, c.Create(ctx, sv)
	}
	layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: web}\n")})
	if err != nil {
		return err
	}
	repo := registry.Addr + "/" + stagesNS + "/web-staging"
	digest, err := (&oci.Client{}).PushArtifact(ctx, repo, layer, nil)
	if err != nil {
		return err
	}
	staging, err := prep("web-staging-1", "web-staging", "sha256:"+strings.Repeat("6", 64), repo, digest)
	if err != nil {
		return err
	}
	sv, err := orderAndServing("web-staging", "staging", staging.Name)
	if err != nil {
		return err
	}
	sv.Status.Revision = digest
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonDeployed, Message: "1 of 1 clusters healthy", ObservedGeneration: sv.Generation})
	sv.Status.TickSoakClock(metav1.Now())
	if err := c.Status().Update(ctx, sv); err != nil {
		return err
	}
	signer, err := (&record.Keys{Client: c, Namespace: kokumiNS}).Ensure(ctx)
	if err != nil {
		return err
	}
	if _, err := (&record.Store{Client: &oci.Client{}}).Attach(ctx, repo, digest, signer, record.Predicate{
		Order: "web-staging", Namespace: stagesNS, Environment: "staging", TargetNamespace: "web",
		Preparation: staging.Name, Clusters: []string{"stage-1"}, Time: time.Now().UTC().Truncate(time.Second),
	}); err != nil {
		return fmt.Errorf("attach web-staging-1's record: %w", err)
	}
	if _, err := prep("web-prod-1", "web-prod", "sha256:"+strings.Repeat("7", 64), registry.Addr+"/"+stagesNS+"/web-prod", "sha256:"+strings.Repeat("8", 64)); err != nil {
		return err
	}
	_, err = orderAndServing("web-prod", "prod", "")
	return err
}

// viewer makes the ServiceAccount viewer of teamNS, which may read Kokumi's kinds there and
// change nothing, and keeps a token of it in viewerToken.
func viewer(ctx context.Context) error {
	c := env.Client
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "kokumi-viewer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if err := c.Create(ctx, role); err != nil {
		return err
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: teamNS, Name: "viewer"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}); err != nil {
		return err
	}
	tok, err := harness.IssueToken(ctx, env.Config, teamNS, "viewer")
	if err != nil {
		return err
	}
	viewerToken = tok
	return nil
}

// setServingStatus writes web's status as the Serving reconciler would: edge-3 held, edge-2
// degraded, and edge-1 degraded too when degraded1.
func setServingStatus(ctx context.Context, degraded1 bool) error {
	var sv v1.Serving
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "web"}, &sv); err != nil {
		return err
	}
	var web2 v1.Preparation
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "web-2"}, &web2); err != nil {
		return err
	}
	sv.Status.Running = []v1.RevisionCount{{Revision: web2.Spec.Artifact.Digest, Clusters: 3}}
	held := metav1.NewTime(time.Now().Add(-5 * time.Minute).Truncate(time.Second))
	sv.Status.Revision = revision
	sv.Status.Clusters = v1.ClusterCounts{Selected: 3, Healthy: 1, Degraded: 1, Held: 1}
	sv.Status.Targets = []v1.Target{
		{Cluster: "edge-3", Application: teamNS + "-web-edge-3", Since: held, Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "Cluster edge-3 is not Ready: Unreachable"}}},
		{Cluster: "edge-2", Application: teamNS + "-web-edge-2", Revision: revision, Conditions: []v1.TargetCondition{{Type: "Degraded", Reason: v1.ReasonDegraded, Message: "Deployment web: progress deadline exceeded"}}},
	}
	message := "1 of 3 clusters degraded: edge-2"
	if degraded1 {
		sv.Status.Clusters.Healthy, sv.Status.Clusters.Degraded = 0, 2
		sv.Status.Targets = append(sv.Status.Targets, v1.Target{Cluster: "edge-1", Application: teamNS + "-web-edge-1", Revision: revision,
			Conditions: []v1.TargetCondition{{Type: "Degraded", Reason: v1.ReasonDegraded, Message: "Deployment web: progress deadline exceeded"}}})
		message = "2 of 3 clusters degraded: edge-1, edge-2"
	}
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeploymentFailed, Message: message})
	return env.Client.Status().Update(ctx, &sv)
}

// application creates the Application Kokumi would keep for a Serving on cluster, with the
// status Argo CD would write.
func application(ctx context.Context, ns, serving, cluster, health, sync, message string, since time.Time) error {
	a := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"project":     "edge",
			"source":      map[string]any{"repoURL": "oci://127.0.0.1:5000/" + ns + "/" + serving, "path": ".", "targetRevision": revision},
			"destination": map[string]any{"server": "https://" + cluster + ".example:6443", "namespace": "web"},
		},
		"status": map[string]any{
			"sync":   map[string]any{"status": sync, "revision": revision},
			"health": map[string]any{"status": health, "message": message, "lastTransitionTime": since.UTC().Format(time.RFC3339)},
		},
	}}
	a.SetGroupVersionKind(argocd.ApplicationGVK)
	a.SetNamespace(argoNS)
	a.SetName(fmt.Sprintf("%s-%s-%s", ns, serving, cluster))
	a.SetLabels(map[string]string{
		argocd.LabelServing: serving, argocd.LabelServingNamespace: ns, argocd.LabelCluster: cluster,
		argocd.LabelManagedBy: argocd.ManagedByKokumi,
	})
	return env.Client.Create(ctx, a)
}

// setAppHealth writes what Argo CD reports of web's Application on cluster.
func setAppHealth(ctx context.Context, cluster, health, sync, message string) error {
	a := &unstructured.Unstructured{}
	a.SetGroupVersionKind(argocd.ApplicationGVK)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: argoNS, Name: teamNS + "-web-" + cluster}, a); err != nil {
		return err
	}
	a.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": sync, "revision": revision},
		"health": map[string]any{"status": health, "message": message, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
	}
	return env.Client.Update(ctx, a)
}

// fleet creates the Serving fleet over fleetSize clusters: fleetHeld of them held, the rest
// healthy, each with its Application.
func fleet(ctx context.Context) error {
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "fleet"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "fleet"},
	}}
	if err := env.Client.Create(ctx, sv); err != nil {
		return err
	}
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	sv.Status.Clusters = v1.ClusterCounts{Selected: fleetSize, Healthy: fleetSize - fleetHeld, Held: fleetHeld}
	// Deployed a moment ago: its "… ago" moves by the second on a quiet fleet.
	deployed := metav1.NewTime(time.Now().Truncate(time.Second))
	sv.Status.Revision, sv.Status.DeployedRevision, sv.Status.DeployedSince = revision, revision, &deployed
	for i := range fleetHeld {
		sv.Status.Targets = append(sv.Status.Targets, v1.Target{Cluster: fmt.Sprintf("store-%04d", i*100+1), Since: since,
			Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "the Cluster is not Ready"}}})
	}
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Deployed", Message: fmt.Sprintf("%d of %d clusters healthy", fleetSize-fleetHeld, fleetSize)})
	if err := env.Client.Status().Update(ctx, sv); err != nil {
		return err
	}
	return inParallel(fleetSize, func(i int) error {
		return application(ctx, teamNS, "fleet", fmt.Sprintf("store-%04d", i), "Healthy", "Synced", "", since.Time)
	})
}

// rollingOut creates the Serving waves of teamNS, rolling out in two waves as the Serving
// reconciler writes it: the canary healthy and soaking, the rest waiting.
func rollingOut(ctx context.Context) error {
	c := env.Client
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "waves"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "waves"}, PreparationName: "waves-2"}}
	if err := c.Create(ctx, sv); err != nil {
		return err
	}
	since := metav1.NewTime(time.Now().Add(-3 * time.Minute).Truncate(time.Second))
	sv.Status.Clusters = v1.ClusterCounts{Selected: 5, Healthy: 1, Progressing: 4}
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: "waves-2", From: "waves-1", State: v1.RolloutProgressing, Wave: "canary", WaveHealthySince: &since,
		Waves: []v1.WaveCount{{Name: "canary", Selected: 1, Healthy: 1}, {Name: "rest", Selected: 4, Waiting: 4}},
		Verifications: []v1.VerificationResult{{Name: "error-rate", Wave: "canary", Kind: "http", Phase: v1.VerificationRunning, Passes: 1, Runs: 1, Completed: 1,
			Started: &since, Message: `successCondition holds; the answer: 200 OK in 8ms: {"status":"success","data":{"result":[{"value":[1733390000,"0.002"]}]}}`}}}
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonProgressing,
		Message: "wave canary is healthy and soaks until 10m0s have passed"})
	if err := c.Status().Update(ctx, sv); err != nil {
		return err
	}
	// held rolls out the same way; the scenario rollout-controls pauses it.
	held := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "held"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "held"}, PreparationName: "held-2"}}
	if err := c.Create(ctx, held); err != nil {
		return err
	}
	held.Status = *sv.Status.DeepCopy()
	held.Status.Rollout.Preparation, held.Status.Rollout.From = "held-2", "held-1"
	return c.Status().Update(ctx, held)
}

// promotedNotRunning creates the Serving runs of teamNS, whose Order deploys to the Environment
// one-gate (one approval, no roll-out policy): both its clusters run runs-1, and runs-2 is
// promoted and awaits the Environment's approval, as the Serving reconciler writes it. The
// control action runs-reset puts it back so; runs-aborted aborts the roll-out of runs-2;
// runs-gate-passed clears the gate, as the controller does once the approval counts.
func promotedNotRunning(ctx context.Context) error {
	c := env.Client
	if err := c.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "one-gate"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "one-gate"}}, Project: "one-gate",
		Approval: &v1.ApprovalPolicy{Required: 1},
	}}); err != nil {
		return err
	}
	// Its two Clusters, Ready: they run runs-1.
	for _, name := range []string{"gated-1", "gated-2"} {
		if err := readyCluster(ctx, name, map[string]string{"env": "one-gate"}); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "runs"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "one-gate"},
		Promotion: v1.Promotion{Mode: v1.PromotionManual}}}); err != nil {
		return err
	}
	for i, name := range []string{"runs-1", "runs-2"} {
		layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: runs, namespace: web}\ndata: {release: %q}\n", name))})
		if err != nil {
			return err
		}
		repo := registry.Addr + "/" + teamNS + "/runs"
		digest, err := (&oci.Client{}).PushArtifact(ctx, repo, layer, nil)
		if err != nil {
			return err
		}
		p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name}, Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: "runs"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.8.0", Digest: "sha256:" + strings.Repeat(fmt.Sprint(i+1), 64)},
			TargetNamespace: "web", Artifact: v1.Artifact{Ref: "oci://" + repo + "@" + digest, Digest: digest}, ConfigHash: name,
		}}
		if err := c.Create(ctx, p); err != nil {
			return err
		}
		if i == 0 {
			p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: "one-gate", Clusters: 2, Time: metav1.NewTime(time.Now().Add(-time.Hour)), Digest: "sha256:" + strings.Repeat("c", 64)}}
		}
		apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"})
		if err := c.Status().Update(ctx, p); err != nil {
			return err
		}
		time.Sleep(1100 * time.Millisecond) // creation times are in seconds: keep them apart
	}
	if err := c.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "runs"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "runs"}, PreparationName: "runs-2", PromotedBy: "erin"}}); err != nil {
		return err
	}
	return runsState(ctx, "reset")
}

// runsState sets the Serving runs as the controller would: "reset" (runs-2 promoted, awaiting
// the Environment's approval, both clusters on runs-1), "aborted" (its roll-out aborted by
// alice) or "gate-passed" (the approval counted; runs-2 rolls out).
func runsState(ctx context.Context, state string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sv v1.Serving
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "runs"}, &sv); err != nil {
			return err
		}
		if state == "reset" {
			sv.Spec.PreparationName, sv.Spec.PromotedBy, sv.Spec.Approvals, sv.Spec.Rollout = "runs-2", "erin", nil, nil
			if err := env.Client.Update(ctx, &sv); err != nil {
				return err
			}
		}
		var runs1 v1.Preparation
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "runs-1"}, &runs1); err != nil {
			return err
		}
		digest := runs1.Spec.Artifact.Digest
		since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
		sv.Status.Running = []v1.RevisionCount{{Revision: digest, Clusters: 2}}
		sv.Status.Revision, sv.Status.DeployedRevision, sv.Status.DeployedSince = digest, digest, &since
		sv.Status.Clusters = v1.ClusterCounts{Selected: 2, Healthy: 2}
		// The roll-out's message, as the Serving reconciler decides it (rollout.Decide).
		gate := &v1.ApprovalPolicy{Required: 1}
		course := rollout.Decide(rollout.Input{Policy: rollout.Effective(nil, nil, nil, "runs-2", true), Preparation: "runs-2", From: "runs-1", Now: time.Now(),
			Members: []rollout.Member{{Name: "gated-1", Standing: rollout.Untouched, HasApplication: true}, {Name: "gated-2", Standing: rollout.Untouched, HasApplication: true}},
			Gates:   rollout.Gates{Approval: gate, Serving: "runs", PromotedBy: "erin"}})
		ro := &v1.RolloutStatus{Preparation: "runs-2", From: "runs-1", Attempt: sv.Generation, State: v1.RolloutProgressing, Awaiting: v1.EnvironmentGate,
			Waves:   []v1.WaveCount{{Name: "unselected", Selected: 2, Waiting: 2}},
			Message: course.Status.Message}
		// Ready folds the clusters (fleet.Fold): none runs runs-2 yet.
		ready := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonProgressing,
			Message: "Deploying Preparation runs-2: healthy on 0 of 2 Ready clusters; waiting for gated-1, gated-2"}
		switch state {
		case "aborted":
			ro.State, ro.Awaiting, ro.By = v1.RolloutAborted, "", "alice"
			ro.Message = "alice aborted the roll-out of Preparation runs-2: the clusters it changed went back to runs-1"
			ready.Message = ro.Message
		case "gate-passed":
			ro.Awaiting, ro.Message = "", ""
			ready.Message = "rolling out runs-2"
		}
		sv.Status.Rollout = ro
		apimeta.SetStatusCondition(&sv.Status.Conditions, ready)
		return env.Client.Status().Update(ctx, &sv)
	})
}

// awaitingApproval creates the Serving gate of teamNS, whose roll-out of gate-2 waits for
// approvals of the wave canary, as the Serving reconciler writes it: the Environment approving
// asks two, from others than the promoter (the admin, who promoted it); dana approved already.
func awaitingApproval(ctx context.Context) error {
	c := env.Client
	if err := c.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "approving"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "approving"}}, Project: "approving",
		Rollout: &v1.RolloutPolicy{Waves: []v1.RolloutWave{
			{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
				Approval: &v1.ApprovalPolicy{Required: 2, SeparateFromPromoter: true}},
			{Name: "rest"},
		}},
	}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gate"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "approving"},
		Promotion: v1.Promotion{Mode: v1.PromotionManual}}}); err != nil {
		return err
	}
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "gate"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "gate"}, PreparationName: "gate-2", PromotedBy: env.AdminName,
		Approvals: []v1.Approval{{Preparation: "gate-1", Wave: "canary", By: "frank"}, {Preparation: "gate-2", Wave: "canary", By: "dana"}}}}
	if err := c.Create(ctx, sv); err != nil {
		return err
	}
	sv.Status.Clusters = v1.ClusterCounts{Selected: 4, Held: 4}
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: "gate-2", From: "gate-1", State: v1.RolloutProgressing, Wave: "canary", Awaiting: "canary",
		Waves: []v1.WaveCount{{Name: "canary", Selected: 1, Waiting: 1}, {Name: "rest", Selected: 3, Waiting: 3}}}
	return c.Status().Update(ctx, sv)
}

// readyCluster creates the Ready Cluster name with labels.
func readyCluster(ctx context.Context, name string, labels map[string]string) error {
	cl := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	if err := env.Client.Create(ctx, cl); err != nil {
		return fmt.Errorf("create Cluster %s: %w", name, err)
	}
	apimeta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reachable", Message: "the API server answers"})
	if err := env.Client.Status().Update(ctx, cl); err != nil {
		return fmt.Errorf("make Cluster %s Ready: %w", name, err)
	}
	return nil
}

// plannedWaves creates the Serving planned of teamNS, which deploys nothing yet, whose Order
// deploys to the Environment waved: a roll-out policy of two waves (canary: the Cluster
// waved-1, soak 10m; rest: waved-2 and waved-3, one at a time), a failure budget of 1 and
// Rollback. Its Preparation planned-1 is Ready, to promote.
func plannedWaves(ctx context.Context) error {
	c := env.Client
	for i, ring := range []string{"canary", "main", "main"} {
		if err := readyCluster(ctx, fmt.Sprintf("waved-%d", i+1), map[string]string{"env": "waved", "ring": ring}); err != nil {
			return err
		}
	}
	one := intstr.FromInt32(1)
	if err := c.Create(ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "waved"},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "waved"}}, Project: "waved",
			Rollout: &v1.RolloutPolicy{
				Waves: []v1.RolloutWave{
					{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: &metav1.Duration{Duration: 10 * time.Minute}},
					{Name: "rest", MaxUnavailable: &one},
				},
				FailureBudget: 1, OnFailure: v1.RolloutRollback,
			}},
	}); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "planned"},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "waved"},
			Promotion: v1.Promotion{Mode: v1.PromotionManual}},
	}); err != nil {
		return err
	}
	digest := "sha256:" + strings.Repeat("9", 64)
	prep := &v1.Preparation{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "planned-1"},
		Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: "planned"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.8.0", Digest: "sha256:" + strings.Repeat("8", 64)},
			TargetNamespace: "web",
			Artifact:        v1.Artifact{Ref: "oci://" + registry.Addr + "/" + teamNS + "/planned@" + digest, Digest: digest},
			ConfigHash:      strings.Repeat("7", 16),
		},
	}
	if err := c.Create(ctx, prep); err != nil {
		return err
	}
	apimeta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Built", Message: "pushed"})
	if err := c.Status().Update(ctx, prep); err != nil {
		return err
	}
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "planned"}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "planned"}}}
	if err := c.Create(ctx, sv); err != nil {
		return err
	}
	apimeta.SetStatusCondition(&sv.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonNoPreparation, Message: "promote a Preparation"})
	return c.Status().Update(ctx, sv)
}
