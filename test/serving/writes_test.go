package serving

import (
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// refuseApplicationsFor makes the API server refuse every write of an Application for cluster,
// with a ValidatingAdmissionPolicy, until the returned function lifts it.
func (f *fixture) refuseApplicationsFor(cluster string) (lift func()) {
	f.t.Helper()
	name := "refuse-" + cluster
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"argoproj.io"}, APIVersions: []string{"*"}, Resources: []string{"applications"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("!has(object.metadata.labels) || !(%q in object.metadata.labels) || object.metadata.labels[%q] != %q",
					argocd.LabelCluster, argocd.LabelCluster, cluster),
				Message: "the quota of cluster " + cluster + " is exhausted",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	must(f.t, env.Client.Create(f.ctx, policy))
	must(f.t, env.Client.Create(f.ctx, binding))
	lift = func() {
		_ = env.Client.Delete(f.ctx, binding)
		_ = env.Client.Delete(f.ctx, policy)
	}
	f.t.Cleanup(lift)
	// The policy takes effect once the API server has loaded it: probe with a write of our own.
	f.eventually("the API server refuses Applications for "+cluster, func() error {
		probe := (&argocd.ApplicationSpec{
			Name: "probe-" + cluster, Namespace: cfg.ArgoCDNamespace, ServingNamespace: f.ns, ServingName: "probe",
			Cluster: cluster, Project: f.project, RepoURL: "oci://registry.example/probe", Revision: digestOf("probe"),
			Server: "https://probe.example:6443", TargetNamespace: "probe",
		}).Build()
		if err := env.Client.Create(f.ctx, probe); err == nil {
			_ = env.Client.Delete(f.ctx, probe)
			return fmt.Errorf("an Application for %s was admitted", cluster)
		}
		return nil
	})
	return lift
}

func TestAFailedApplicationWriteHoldsOnlyItsClusterAndIsRetried(t *testing.T) {
	f := newFixture(t)
	for _, c := range []string{"w1", "w2", "w3"} {
		f.cluster(c, true)
	}
	lift := f.refuseApplicationsFor("w2")
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)

	// The other clusters get their Applications and deploy; w2 says why it does not.
	f.eventually("Applications of w1 and w3", func() error {
		for _, c := range []string{"w1", "w3"} {
			if _, err := f.app(c); err != nil {
				return err
			}
		}
		return nil
	})
	f.healthy(prep.Spec.Artifact.Digest, "w1", "w3")
	f.eventually("w2 shows the refused write", func() error {
		s := f.serving()
		tg := f.target(s, "w2")
		if tg == nil || tg.Conditions[0].Reason != v1.ReasonApplicationWriteFailed {
			return fmt.Errorf("w2's target is %+v", tg)
		}
		if !strings.Contains(tg.Conditions[0].Message, "quota of cluster w2 is exhausted") {
			return fmt.Errorf("w2's message %q does not carry the API server's refusal", tg.Conditions[0].Message)
		}
		if s.Status.Clusters.Healthy != 2 || s.Status.Clusters.Progressing != 1 {
			return fmt.Errorf("counts %+v, want 2 healthy and w2 progressing", s.Status.Clusters)
		}
		return nil
	})
	if _, err := f.app("w2"); err == nil {
		t.Fatal("an Application for w2 exists though the API server refuses it")
	}

	// The refusal lifts: the write is retried without any other change.
	lift()
	f.healthy(prep.Spec.Artifact.Digest, "w2")
	f.ready(v1.ReasonDeployed, "")
}
