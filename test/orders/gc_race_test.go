package orders

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/gc"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// onFirstDelete calls during once, on the first DELETE the collector sends to the registry,
// before that request goes out: whatever during does lands while the collector is in the
// middle of a pass.
type onFirstDelete struct {
	once   sync.Once
	during func()
}

func (o *onFirstDelete) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodDelete {
		o.once.Do(o.during)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestAPreparationPromotedWhileTheCollectorRunsIsKept lands a promotion in the collector's pass:
// it reads what is kept, and while it deletes the first old Preparation's artifact (registry
// calls of up to 30 s each), a person promotes the second one. The second stays, with its
// artifact: what is kept is decided again right before each deletion, and the object, deleted
// first, is the commit point.
func TestAPreparationPromotedWhileTheCollectorRunsIsKept(t *testing.T) {
	ctx := context.Background()
	creds := registryCredentials(t)
	pusher := bundledClient(t, creds.Pusher)
	ns := newNamespace(t)
	// An Order whose Product does not exist: the Order reconciler renders nothing, and the
	// Preparations are the test's own (history 10 of the suite's collector never reaches them).
	order(t, ns, "race", "absent", "", v1.PromotionManual)
	o := getOrder(t, ns, "race")
	repository := bundled.Addr + "/" + preparation.OwnArtifactPath(ns, "race")
	var preps []*v1.Preparation
	parent := ""
	for i := 1; i <= 3; i++ {
		data, err := oci.TarGz(map[string][]byte{preparation.ManifestsFile: fmt.Appendf(nil, "kind: ConfigMap\nmetadata: {name: release-%d}\n", i)})
		if err != nil {
			t.Fatal(err)
		}
		digest, err := pusher.PushArtifact(ctx, repository, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &v1.Preparation{
			ObjectMeta: metav1.ObjectMeta{Name: preparation.Name("race", digest), Namespace: ns, Labels: map[string]string{preparation.LabelOrder: "race"}},
			Spec: v1.PreparationSpec{OrderRef: v1.LocalObjectReference{Name: "race"}, ProductRef: v1.LocalObjectReference{Name: "absent"},
				Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digest},
				TargetNamespace: ns, Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest}, ConfigHash: fmt.Sprint(i), ParentDigest: parent},
		}
		if err := ctrl.SetControllerReference(o, p, env.Scheme); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		preps, parent = append(preps, p), digest
	}
	serving := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "race", Namespace: ns},
		Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "race"}, PreparationName: preps[2].Name, PromotedBy: env.AdminName}}
	if err := env.Client.Create(ctx, serving); err != nil {
		t.Fatal(err)
	}

	// A person promotes the second Preparation while the collector deletes the first's artifact.
	promote := func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var s v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(serving), &s); err != nil {
				return err
			}
			s.Spec.PreparationName, s.Spec.PromotedBy = preps[1].Name, env.AdminName
			return env.Client.Update(ctx, &s)
		})
		if err != nil {
			t.Errorf("promote %s: %v", preps[1].Name, err)
		}
	}
	registry := &oci.Client{Credentials: oci.Credentials{bundled.Addr: creds.Pusher},
		HTTPClient: &http.Client{Transport: &onFirstDelete{during: promote}}}
	keepOne := cfg
	keepOne.PreparationHistory = 1
	collector := &gc.Collector{Client: env.Client, Reader: env.Client, Recorder: events.NewFakeRecorder(16), Config: keepOne, Registry: registry}

	// Renders that just landed are let settle first (10 s).
	var res ctrl.Result
	eventuallyWithin(t, time.Minute, "a pass of the collector", func() (bool, string) {
		var err error
		res, err = collector.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter > 0 {
			time.Sleep(res.RequeueAfter)
			return false, "renders settling"
		}
		return true, ""
	})

	exists := func(p *v1.Preparation) bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(p), &v1.Preparation{}) == nil
	}
	if exists(preps[0]) {
		t.Errorf("%s, beyond the history and kept by nothing, was not collected", preps[0].Name)
	}
	if !exists(preps[1]) {
		t.Fatalf("%s was promoted during the pass and collected anyway", preps[1].Name)
	}
	if _, err := pusher.Pull(ctx, repository, preps[1].Spec.Artifact.Digest); err != nil {
		t.Errorf("the artifact of %s, promoted during the pass, is gone: %v", preps[1].Name, err)
	}
	if !exists(preps[2]) {
		t.Errorf("%s, the newest, was collected", preps[2].Name)
	}
}
