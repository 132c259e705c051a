package orders

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	kconfig "github.com/kokumi-dev/kokumi/internal/config"
	orderctrl "github.com/kokumi-dev/kokumi/internal/controller/order"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// movedNamespace is where the tests run Order reconcilers of their own, each with its address
// of the bundled registry; the suite's manager leaves it alone.
const movedNamespace = "orders-moved"

// startOrders runs an Order reconciler of movedNamespace that reaches the bundled registry at
// addr, until the stop it returns is called or the test ends.
func startOrders(t *testing.T, addr string) (stop func()) {
	t.Helper()
	return startOrdersWith(t, addr, time.Second)
}

// startOrdersWith is startOrders whose failed renders are first tried again after retryAfter.
func startOrdersWith(t *testing.T, addr string, retryAfter time.Duration) (stop func()) {
	t.Helper()
	c := cfg
	c.BundledRegistry = addr
	return startOrdersConfig(t, c, retryAfter)
}

// startOrdersConfig runs an Order reconciler of movedNamespace with configuration c until the
// stop it returns is called or the test ends.
func startOrdersConfig(t *testing.T, c kconfig.Config, retryAfter time.Duration) (stop func()) {
	t.Helper()
	addr := c.BundledRegistry
	sa, err := env.ControllerConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(sa, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{movedNamespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	r := &orderctrl.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kokumi-order"),
		Config: c, RetryAfter: retryAfter, Resync: 2 * time.Second}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the Order reconciler at %s: %v", addr, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startRegistry runs a bundled registry with its content in dir, signing in the controller's
// pusher and puller, until the stop it returns is called or the test ends.
func startRegistry(t *testing.T, dir string) (reg *registry.Registry, stop func()) {
	t.Helper()
	creds := registryCredentials(t)
	reg, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{Dir: dir,
		Credentials: func() (oci.RegistryCredentials, error) { return creds, nil }})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := reg.Stop(); err != nil {
				t.Errorf("stop the registry at %s: %v", reg.Addr, err)
			}
		})
	}
	t.Cleanup(stop)
	return reg, stop
}

// The bundled registry moves: its content behind a new address (a new Service), then a new
// address with nothing in it (a restore that lost its data). Orders keep working.
func TestTheBundledRegistryMovesAndLosesItsContent(t *testing.T) {
	ctx := context.Background()
	ns := movedNamespace
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	src := newSource(t)
	backend, stopBackend := startRegistry(t, t.TempDir())
	old := newCounting(t, backend.Addr)
	stopOld := startOrders(t, old.Addr)
	src.product(t, ns, "pinned", "", src.values("pinned"))
	vendored := src.product(t, ns, "vendored", "", src.values("vendored"))
	vendored.Spec.Images.Policy = v1.ImagePolicyVendor
	if err := env.Client.Update(ctx, vendored); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "pinned", "pinned", "", v1.PromotionAutomatic)
	order(t, ns, "vendored", "vendored", "", v1.PromotionAutomatic)
	pinned := latestPreparation(t, ns, "pinned", func(p *v1.Preparation) bool { return true })
	before := latestPreparation(t, ns, "vendored", vendoredTo(old.Addr))
	if want := "oci://" + old.Addr + "/kokumi/" + ns + "/pinned@" + pinned.Spec.Artifact.Digest; pinned.Spec.Artifact.Ref != want {
		t.Fatalf("artifact %s, want %s", pinned.Spec.Artifact.Ref, want)
	}

	// The registry moves: the same content at a new address; nothing answers at the old one.
	stopOld()
	moved := newCounting(t, backend.Addr)
	old.retarget("127.0.0.1:1")
	startOrders(t, moved.Addr)
	repository, digest := preparation.ArtifactLocation(moved.Addr, &pinned)
	if repository != moved.Addr+"/kokumi/"+ns+"/pinned" || digest != pinned.Spec.Artifact.Digest {
		t.Errorf("the Preparation's artifact is read at %s@%s, want the same digest in the registry at %s", repository, digest, moved.Addr)
	}
	if !inBundled(t, repository+"@"+digest) {
		t.Errorf("%s@%s is not at the new address", repository, digest)
	}

	// The Order of pinned images finds its artifact at the new address: it renders and pushes
	// nothing, and its Preparation stays the latest.
	artifact := `^/v2/kokumi/` + ns + `/pinned/manifests/` + pinned.Spec.Artifact.Digest + `$`
	eventually(t, "three resyncs at the new address", func() (bool, string) {
		n := len(moved.requests(http.MethodHead, artifact))
		return n >= 3, fmt.Sprintf("%d HEAD requests of the artifact", n)
	})
	if writes := writesTo(moved, "/kokumi/"+ns+"/pinned/"); len(writes) != 0 {
		t.Errorf("with nothing changed, the Order wrote to the moved registry: %+v", writes)
	}
	eventually(t, "the Order up to date after the move", func() (bool, string) {
		o := getOrder(t, ns, "pinned")
		return o.Status.LatestPreparation == pinned.Name && len(preparations(t, ns, "pinned")) == 1 && strings.HasPrefix(readyMessage(o), "Up to date"),
			fmt.Sprintf("latest %s (was %s), %d Preparations, Ready %q", o.Status.LatestPreparation, pinned.Name, len(preparations(t, ns, "pinned")), readyMessage(o))
	})

	// The Order whose images were vendored into the old address renders again: the images are
	// vendored at the new address, in a new Preparation that follows the old one.
	after := latestPreparation(t, ns, "vendored", vendoredTo(moved.Addr))
	if after.Spec.ParentDigest != before.Spec.Artifact.Digest || !strings.HasPrefix(after.Spec.Artifact.Ref, "oci://"+moved.Addr+"/") {
		t.Errorf("the vendored Order's new Preparation: parent %s (want %s), artifact %s", after.Spec.ParentDigest, before.Spec.Artifact.Digest, after.Spec.Artifact.Ref)
	}
	eventually(t, "the Serving follows the new Preparation", func() (bool, string) {
		sv := servingOf(t, ns, "vendored")
		return sv.Spec.PreparationName == after.Name, sv.Spec.PreparationName
	})

	// A restore that lost the registry's content: the address stays, nothing is in it. The
	// Orders push their artifacts again, with the same digests, into the same Preparations.
	stopBackend()
	empty, _ := startRegistry(t, t.TempDir())
	moved.retarget(empty.Addr)
	for _, p := range []v1.Preparation{pinned, after} {
		ref := moved.Addr + "/kokumi/" + ns + "/" + p.Spec.OrderRef.Name + "@" + p.Spec.Artifact.Digest
		eventually(t, "the artifact of "+p.Name+" pushed again", func() (bool, string) {
			return inBundled(t, ref), readyMessage(getOrder(t, ns, p.Spec.OrderRef.Name))
		})
		for _, img := range p.Spec.Images {
			if p.Spec.ImagesInBundledRegistry && !inBundled(t, img.Pinned) {
				t.Errorf("the vendored image %s was not copied again", img.Pinned)
			}
		}
		if o := getOrder(t, ns, p.Spec.OrderRef.Name); o.Status.LatestPreparation != p.Name {
			t.Errorf("order %s: latest %s, want %s kept", o.Name, o.Status.LatestPreparation, p.Name)
		}
	}
	if n, m := len(preparations(t, ns, "pinned")), len(preparations(t, ns, "vendored")); n != 1 || m != 2 {
		t.Errorf("%d and %d Preparations, want 1 and 2: none is new", n, m)
	}
	eventually(t, "a Repushed event", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "Repushed" && e.Regarding.Name == "pinned" && strings.Contains(e.Note, pinned.Name) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
}

// latestPreparation waits for the Order's latest Preparation to be one that ok accepts,
// Ready and rendered, and returns it.
func latestPreparation(t *testing.T, ns, name string, ok func(*v1.Preparation) bool) v1.Preparation {
	t.Helper()
	var prep v1.Preparation
	eventually(t, "the Preparation of "+name, func() (bool, string) {
		o := getOrder(t, ns, name)
		if o.Status.LatestPreparation == "" {
			return false, readyMessage(o)
		}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: o.Status.LatestPreparation}, &prep); err != nil {
			return false, err.Error()
		}
		return ok(&prep), fmt.Sprintf("%s: %s", prep.Name, readyMessage(o))
	})
	return prep
}

// writesTo lists the requests through proxy that write under path.
func writesTo(proxy *counting, path string) []request {
	var out []request
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		out = append(out, proxy.requests(method, path)...)
	}
	return out
}

// vendoredTo accepts a Preparation whose images were vendored into the registry at addr.
func vendoredTo(addr string) func(*v1.Preparation) bool {
	return func(p *v1.Preparation) bool {
		return len(p.Spec.Images) > 0 && strings.HasPrefix(p.Spec.Images[0].Pinned, addr+"/vendor/")
	}
}
