package serving

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/controller/serving"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// leftBehind creates the Application Kokumi would have written on cluster for the Serving
// namespace/name of UID uid (none: written before Kokumi labelled UIDs), as a Serving that went
// without its finalizer, a controller down at the wrong moment or a backup restored without its
// Servings leaves it.
func (f *fixture) leftBehind(name, cluster string, uid types.UID) string {
	f.t.Helper()
	spec := fleet.Request{ServingNamespace: f.ns, ServingName: name, ServingUID: uid, ArgoCDNamespace: cfg.ArgoCDNamespace,
		RepoURL: "oci://" + registry.Addr + "/kokumi/" + f.ns + "/" + name, Revision: digestOf("gone"), TargetNamespace: "podinfo",
		Project: argocd.Project{Name: f.project}}.Spec(fleet.Cluster{Name: cluster, Server: "https://" + cluster + ".example:6443"})
	must(f.t, env.Client.Create(f.ctx, spec.Build()))
	return spec.Name
}

func (f *fixture) gone(name string) error {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: name}, app); !apierrors.IsNotFound(err) {
		return fmt.Errorf("Application %s is still there (%w)", name, err)
	}
	return nil
}

// An Application whose Serving is gone keeps syncing with self-heal and prune, and nothing an
// admin changes reaches it any more: Kokumi deletes it (what runs keeps running), and says so.
func TestApplicationsWhoseServingIsGoneAreDeleted(t *testing.T) {
	f := newFixture(t)
	f.cluster("a20", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	s := f.order("edge", prep.Name)
	f.eventually("its Application", func() error {
		if _, err := f.app("a20"); err != nil {
			return err
		}
		return nil
	})

	withUID := f.leftBehind("gone-web", "a20", "0b5c1e4e-3f0c-4d59-9a51-2b9d3c1f0e11")
	legacy := f.leftBehind("gone-api", "a20", "")
	f.eventually("the Applications of Servings that are gone deleted", func() error {
		if err := f.gone(withUID); err != nil {
			return err
		}
		return f.gone(legacy)
	})
	// A live Serving's Application stays, labelled with its UID.
	app, err := f.app("a20")
	must(t, err)
	if got := app.GetLabels()[argocd.LabelServingUID]; got != string(s.UID) {
		t.Errorf("the live Serving's Application carries UID %q, want %q", got, s.UID)
	}
	events := func() []string {
		return append(f.eventsOf("gone-web", serving.ReasonOrphanDeleted), f.eventsOf("gone-api", serving.ReasonOrphanDeleted)...)
	}
	if faults != nil {
		// Under injected faults a delete that took effect may look failed to the controller
		// (a timeout after the API server acted): the next sweep finds nothing left to delete,
		// and that Application's Event is never written. What the test proves there is that
		// both went; each Event written names its Application.
		time.Sleep(5 * time.Second)
		for _, e := range events() {
			if !strings.Contains(e, withUID) && !strings.Contains(e, legacy) {
				t.Errorf("an OrphanDeleted Event names neither: %q", e)
			}
		}
		return
	}
	f.eventually("one OrphanDeleted Event each", func() error {
		got := strings.Join(events(), "\n")
		for _, want := range []string{withUID, legacy} {
			if !strings.Contains(got, want) {
				return fmt.Errorf("no Event names %s: %q", want, got)
			}
		}
		return nil
	})
}

// A Serving deleted and created again under the same name (an Order re-created) is another
// Serving: the Applications the first one wrote go, and it writes its own; it never adopts them.
func TestARecreatedServingAdoptsOnlyItsOwnApplications(t *testing.T) {
	f := newFixture(t)
	f.cluster("a21", true)
	old := f.leftBehind("podinfo-edge", "a21", "6f1d1a3e-8b7e-4f1e-9d0a-5c2b7e9a4d21")
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	s := f.order("edge", prep.Name)
	f.eventually("the new Serving's own Application", func() error {
		app, err := f.app("a21")
		if err != nil {
			return err
		}
		if got := app.GetLabels()[argocd.LabelServingUID]; got != string(s.UID) {
			return fmt.Errorf("Application %s carries UID %q, want %q", old, got, s.UID)
		}
		if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != prep.Spec.Artifact.Digest {
			return fmt.Errorf("it asks for %s", rev)
		}
		return nil
	})
}

// A tenant may update its Servings (to promote by hand) but not strip Kokumi's finalizer: a
// Serving never goes before its Applications. The admission policy ships with the RBAC.
func TestATenantCannotStripTheServingsFinalizer(t *testing.T) {
	f := newFixture(t)
	f.cluster("a22", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.eventually("the finalizer", func() error {
		if s := f.serving(); !contains(s.Finalizers, serving.ServingFinalizer) {
			return fmt.Errorf("finalizers %q", s.Finalizers)
		}
		return nil
	})
	must(t, env.AggregateTenantRoles(f.ctx))
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "devs-edit", Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: f.ns + "-devs"}}}
	must(t, env.Client.Create(f.ctx, binding))
	cfgTenant, err := env.AddUser("mallory-"+f.ns, f.ns+"-devs")
	must(t, err)
	tenant, err := client.New(cfgTenant, client.Options{Scheme: env.Scheme})
	must(t, err)

	s := f.serving()
	stripped := s.DeepCopy()
	stripped.Finalizers = nil
	err = tenant.Patch(f.ctx, stripped, client.MergeFrom(s))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only Kokumi removes its finalizer") {
		t.Fatalf("a tenant stripped the finalizer: %v", err)
	}
	// The same tenant still changes its Serving (as a promotion by hand does); deleted (by its
	// Order's garbage collection, here by an admin), the Serving goes once Kokumi cleaned up.
	promoted := s.DeepCopy()
	if promoted.Annotations == nil {
		promoted.Annotations = map[string]string{}
	}
	promoted.Annotations["team/note"] = "promoted by hand"
	must(t, tenant.Patch(f.ctx, promoted, client.MergeFrom(s)))
	must(t, env.Client.Delete(f.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: s.Name}}))
	f.eventually("the Serving and its Application gone", func() error {
		if n := len(f.apps()); n != 0 {
			return fmt.Errorf("%d Applications", n)
		}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(s), &v1.Serving{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Serving is still there (%w)", err)
		}
		return nil
	})
}

// eventsOf lists the messages of the Events of reason on the object name of the namespace.
func (f *fixture) eventsOf(name, reason string) []string {
	f.t.Helper()
	var list corev1.EventList
	must(f.t, env.Client.List(f.ctx, &list, client.InNamespace(f.ns)))
	var out []string
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
