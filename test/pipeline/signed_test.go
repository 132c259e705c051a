package pipeline

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

// An Environment that asks for signed sources admits, promoted by hand or not, only the
// Preparations whose render verified every input as signed by its keys: the Preparation's
// spec.provenance, which tenants cannot write, says so.
func TestAnEnvironmentAskingSignedSourcesAdmitsOnlyVerifiedPreparations(t *testing.T) {
	f := newFixture(t, 0)
	admin, stranger := recordtest.NewSigner(t), recordtest.NewSigner(t)
	keys := func(name string, labelled bool) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace},
			Data: map[string]string{"admin.pub": string(admin.PublicKeyPEM())}}
		if labelled {
			cm.Labels = map[string]string{v1.TrustedKeysLabel: "true"}
		}
		must(t, env.Client.Create(f.ctx, cm))
	}
	keys(f.ns+"-publishers", true)
	keys(f.ns+"-unmarked", false)
	ask := func(environment, configMap string) {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var e v1.Environment
			must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: environment}, &e))
			e.Spec.SignedSources = &v1.VerifySpec{PublicKeys: []string{configMap}}
			return env.Client.Update(f.ctx, &e)
		}))
	}

	// prod asks; its Product does not verify: promoted by hand, its Preparation is not deployed.
	ask("prod", f.ns+"-publishers")
	f.order("prod", v1.PromotionManual)
	prod := f.latest("app-prod")
	f.promote("app-prod", prod.Name)
	f.servingReady("app-prod", v1.ReasonAwaitingStage, "Environment prod admits only Preparations whose source and images were verified",
		prod.Name+" was rendered without verification")
	if n := f.applications("app-prod"); n != 0 {
		t.Fatalf("prod has %d Applications for a Preparation whose sources were not verified", n)
	}

	// What the check admits, on staging (which requires no stage).
	ask("staging", f.ns+"-publishers")
	for _, c := range []struct {
		what       string
		provenance *v1.PreparationProvenance
		refused    string
	}{
		{"no provenance", nil, "rendered without verification"},
		{"not asked", &v1.PreparationProvenance{KeyID: "k", Sources: v1.SourcesNotAsked}, "rendered without verification"},
		{"signed by a stranger", &v1.PreparationProvenance{KeyID: "k", Sources: v1.SourcesVerified, VerifiedBy: []string{admin.KeyID(), stranger.KeyID()}},
			"signed by key " + stranger.KeyID()},
		{"signed by the Environment's key", &v1.PreparationProvenance{KeyID: "k", Sources: v1.SourcesVerified, VerifiedBy: []string{admin.KeyID()}}, ""},
	} {
		p := prod.DeepCopy()
		p.Spec.Provenance = c.provenance
		verdict, err := pipeline.Check(f.ctx, f.ns, "staging", p)
		must(t, err)
		if verdict.Allowed != (c.refused == "") || !strings.Contains(verdict.Message, c.refused) {
			t.Errorf("%s: %+v, want refused %q", c.what, verdict, c.refused)
		}
	}
	ask("staging", f.ns+"-unmarked")
	p := prod.DeepCopy()
	p.Spec.Provenance = &v1.PreparationProvenance{KeyID: "k", Sources: v1.SourcesVerified, VerifiedBy: []string{admin.KeyID()}}
	if verdict, err := pipeline.Check(f.ctx, f.ns, "staging", p); err != nil || verdict.Allowed || !strings.Contains(verdict.Message, "not labelled "+v1.TrustedKeysLabel) {
		t.Errorf("keys of a ConfigMap no admin marked: %+v, %v; want refused", verdict, err)
	}
}
