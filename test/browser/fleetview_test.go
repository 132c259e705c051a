package browser

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/test/harness"
)

func TestFleetViewFiltersPagesKeyboardAndPhone(t *testing.T) { scenario(t, "fleet-view") }

// The Fleet page's objects: in storesNS, the Environment stores selects storesSize Clusters
// (shop-000…, region eu when even, us when odd; shop-007 is not Ready). The Order site rolls
// out site-2: shop-003 drifted, shop-010…shop-019 wait in their wave running site-1, the others
// run site-2 healthily. The Order pay deploys pay-1, which no cluster runs yet.
const (
	storesNS   = "team-stores"
	storesSize = 120
)

// storesDigest is the artifact digest of the Preparation of digit d.
func storesDigest(d string) string { return "sha256:" + strings.Repeat(d, 64) }

// fleetView creates the Fleet page's objects.
func fleetView(ctx context.Context) error {
	c := env.Client
	if err := env.CreateNamespace(ctx, storesNS); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: storesNS, Name: "stores"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleetview": "stores"}}, Project: "stores",
	}}); err != nil {
		return err
	}
	cluster := func(i int) string { return fmt.Sprintf("shop-%03d", i) }
	if err := inParallel(storesSize, func(i int) error {
		region := "eu"
		if i%2 == 1 {
			region = "us"
		}
		cl := &v1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: cluster(i), Labels: map[string]string{"fleetview": "stores", "region": region}},
			Spec:       v1.ClusterSpec{Server: "https://" + cluster(i) + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: cluster(i)}},
		}
		if err := c.Create(ctx, cl); err != nil {
			return fmt.Errorf("create Cluster %s: %w", cl.Name, err)
		}
		cond := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reachable", Message: "the API server answers"}
		if i == 7 {
			cond = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Unreachable", Message: "connection refused"}
		}
		apimeta.SetStatusCondition(&cl.Status.Conditions, cond)
		return c.Status().Update(ctx, cl)
	}); err != nil {
		return err
	}
	for _, p := range []struct{ name, order, digit string }{{"site-1", "site", "1"}, {"site-2", "site", "2"}, {"pay-1", "pay", "3"}} {
		if err := c.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: storesNS, Name: p.name}, Spec: v1.PreparationSpec{
			OrderRef: v1.LocalObjectReference{Name: p.order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.7.0", Digest: storesDigest("5")},
			TargetNamespace: "shop", Artifact: v1.Artifact{Ref: "oci://127.0.0.1:5000/" + storesNS + "/" + p.order + "@" + storesDigest(p.digit), Digest: storesDigest(p.digit)},
			ConfigHash: p.name,
		}}); err != nil {
			return err
		}
	}
	for _, o := range []struct{ order, prep, digit string }{{"site", "site-2", "2"}, {"pay", "pay-1", "3"}} {
		if err := c.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: storesNS, Name: o.order}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "stores"}, Promotion: v1.Promotion{Mode: v1.PromotionManual},
		}}); err != nil {
			return err
		}
		sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: storesNS, Name: o.order}, Spec: v1.ServingSpec{
			OrderRef: v1.LocalObjectReference{Name: o.order}, PreparationName: o.prep,
		}}
		if err := c.Create(ctx, sv); err != nil {
			return err
		}
		sv.Status.Revision = storesDigest(o.digit)
		if o.order == "site" {
			sv.Status.Targets = append(sv.Status.Targets, v1.Target{Cluster: cluster(3), Revision: storesDigest("2"),
				Conditions: []v1.TargetCondition{{Type: "Drifted", Reason: "OutOfSync", Message: "Deployment/site was changed on the cluster"}}})
			for i := 10; i < 20; i++ {
				sv.Status.Targets = append(sv.Status.Targets, v1.Target{Cluster: cluster(i), Revision: storesDigest("1"),
					Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: v1.ReasonWaiting, Message: "wave rest has not started"}}})
			}
		}
		if err := c.Status().Update(ctx, sv); err != nil {
			return err
		}
	}
	since := time.Now().Add(-time.Hour)
	return inParallel(storesSize, func(i int) error {
		rev, sync := storesDigest("2"), "Synced"
		switch {
		case i >= 10 && i < 20:
			rev = storesDigest("1")
		case i == 3:
			sync = "OutOfSync"
		}
		_, err := env.CreateApplication(ctx, argoNS, storesNS, "site", cluster(i), harness.AppStatus{Health: "Healthy", Sync: sync, Revision: rev, Since: since})
		return err
	})
}

// inParallel runs do for 0…n-1 on 16 workers and returns the first error.
func inParallel(n int, do func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- do(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
