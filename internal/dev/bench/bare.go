package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// asController is a client that signs in as the controller (its ServiceAccount), without a rate
// limit, as controller-runtime configures the controller's.
func (r *run) asController() (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.hub.controllerKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the controller's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: r.admin.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("a client as the controller: %w", err)
	}
	return c, nil
}

// bare times 16 workers creating the N Applications Kokumi would write, into a namespace of
// their own, until the observer saw them all; then deletes them.
func (r *run) bare() error {
	n := r.opts.N
	ns, writer := bareNamespace, r.admin
	if r.opts.BareAsController {
		var err error
		if writer, err = r.asController(); err != nil {
			return err
		}
		if r.opts.BareBeside {
			// Beside the running controller, in a namespace it does not watch, with the
			// ServiceAccount's rights there as in Argo CD's.
			if err := r.grantBareNamespace(); err != nil {
				return err
			}
		} else {
			ns = argocdNamespace
		}
	}
	var (
		informer *process
		alive    func() error
	)
	if r.opts.BareInformer {
		var err error
		if informer, err = r.bareInformer(ns); err != nil {
			return err
		}
		defer informer.stop()
		// Each wait fails if the informer ended: the comparison would no longer be even.
		alive = informer.alive
	}
	objs := make([]*unstructured.Unstructured, n)
	for i := range objs {
		objs[i] = r.spec(i, r.preps[0], ns).Build()
	}
	api, self := r.apiCPU(), selfCPU()
	start := time.Now()
	if err := parallel(r.opts.BareWorkers, n, func(i int) error {
		if err := writer.Create(r.ctx, objs[i]); err != nil {
			return fmt.Errorf("create Application %s: %w", objs[i].GetName(), err)
		}
		return nil
	}); err != nil {
		return err
	}
	d, err := waitCount(r.ctx, start, r.opts.Timeout, "the bare client's Applications", n, func() (int, error) {
		return r.obs.applications(r.ctx, ns, nil, "")
	}, alive)
	if err != nil {
		return err
	}
	r.row.Bare, r.row.BareCPU = d, r.bareCPU(self, d)
	r.noteAPICPU("created N Applications", api)
	r.logf("bare client: %d Applications in %s", n, d.Round(time.Millisecond))

	// The same Applications patched to the next Preparation's digest: the floor of a change's
	// roll-out, which the API server answers with a read, a merge and an update of each.
	api, self = r.apiCPU(), selfCPU()
	start = time.Now()
	if err := parallel(r.opts.BareWorkers, n, func(i int) error {
		next := objs[i].DeepCopy()
		if err := unstructured.SetNestedField(next.Object, r.preps[1].digest, "spec", "source", "targetRevision"); err != nil {
			return fmt.Errorf("set the targetRevision of Application %s: %w", objs[i].GetName(), err)
		}
		if err := writer.Patch(r.ctx, next, client.MergeFromWithOptions(objs[i], client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("patch Application %s: %w", objs[i].GetName(), err)
		}
		return nil
	}); err != nil {
		return err
	}
	if r.row.BarePatch, err = waitCount(r.ctx, start, r.opts.Timeout, "the bare client's Applications at the next digest", n, func() (int, error) {
		return r.obs.applications(r.ctx, ns, nil, r.preps[1].digest)
	}, alive); err != nil {
		return err
	}
	r.row.BarePatchCPU = r.bareCPU(self, r.row.BarePatch)
	r.noteAPICPU("patched them", api)
	r.logf("bare client: %d Applications patched in %s", n, r.row.BarePatch.Round(time.Millisecond))

	// And deleted one by one, as Kokumi deletes a Serving's: carrying the status Argo CD wrote,
	// as Kokumi's do when they are deleted, so that both delete the same objects.
	if r.opts.ArgoCDStatus {
		if err := parallel(16, n, func(i int) error { return r.syncedAt(objs[i], r.preps[1].digest) }); err != nil {
			return err
		}
		if _, err := waitCount(r.ctx, time.Now(), r.opts.Timeout, "the bare client's Applications Synced", n, func() (int, error) {
			return r.obs.syncedApplications(r.ctx, ns)
		}, alive); err != nil {
			return err
		}
	}
	// Each only at the UID and resourceVersion its informer holds, as Kokumi deletes one (so
	// that an Application changed since is not deleted); read before the timer, since Kokumi
	// reads its cache's copies without a copy.
	unchanged, err := r.obs.preconditions(r.ctx, ns)
	if err != nil {
		return err
	}
	api, self = r.apiCPU(), selfCPU()
	start = time.Now()
	if err := parallel(r.opts.BareWorkers, n, func(i int) error {
		if err := writer.Delete(r.ctx, objs[i], unchanged[objs[i].GetName()]); err != nil {
			return fmt.Errorf("delete Application %s: %w", objs[i].GetName(), err)
		}
		return nil
	}); err != nil {
		return err
	}
	if r.row.BareDelete, err = waitCount(r.ctx, start, r.opts.Timeout, "the bare client's Applications to go", 0, func() (int, error) {
		return r.obs.applications(r.ctx, ns, nil, "")
	}, alive); err != nil {
		return err
	}
	r.row.BareDeleteCPU = r.bareCPU(self, r.row.BareDelete)
	r.noteAPICPU("deleted them", api)
	r.logf("bare client: %d Applications deleted in %s", n, r.row.BareDelete.Round(time.Millisecond))
	if informer != nil {
		if c, err := informer.cpu(); err == nil {
			r.row.Notes = append(r.row.Notes, fmt.Sprintf("the bare client's informer (a process of its own, not counted in the bare client's CPU) used %s of CPU from before its creates until after its deletes", secs(c)))
		}
	}
	return nil
}

// bareInformer builds and starts the bare client's informer of the Applications of ns (see
// Options.BareInformer; hack/bench/informer), and waits until its cache has synced.
func (r *run) bareInformer(ns string) (*process, error) {
	kubeconfig := r.hub.adminKubeconfig
	if r.opts.BareAsController {
		kubeconfig = r.hub.controllerKubeconfig
	}
	bin, err := goBuild(r.ctx, r.hub.assets.Root, "./hack/bench/informer", filepath.Join(r.dir, "informer"))
	if err != nil {
		return nil, fmt.Errorf("the bare client's informer: %w", err)
	}
	logPath := filepath.Join(r.dir, "bare-informer.log")
	p, err := startProcess("the bare client's informer", logPath, bin, []string{"--kubeconfig", kubeconfig, "--namespace", ns}, nil)
	if err != nil {
		return nil, err
	}
	synced := func() (int, error) {
		if data, err := os.ReadFile(logPath); err == nil && strings.Contains(string(data), "synced\n") {
			return 1, nil
		}
		return 0, nil
	}
	if _, err := waitCount(r.ctx, time.Now(), time.Minute, "the bare client's informer to sync", 1, synced, p.alive); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w; the end of its log: %s", err, tail(logPath, 5))
	}
	return p, nil
}

// bareConditions says how the bare client wrote, for the table's notes.
func bareConditions(opts Options) string {
	who := "as an admin (system:masters) into a namespace of its own"
	if opts.BareAsController {
		who = "as the controller's ServiceAccount (its token, RBAC and API priority)"
	}
	when := "before the controller started"
	if opts.BareBeside {
		when = "beside the controller, once it had probed the N Clusters Ready, less the members' server's CPU at its idle rate"
	}
	how := "the bare client wrote " + who + ", " + when
	if opts.BareInformer {
		how += ", with an informer of its own in a process of its own beside the benchmark's observer (two watchers of its writes, as of Kokumi's)"
	}
	return how
}

// bareCPU is this process's CPU since self, over a phase of the bare client that took d, less
// what the members' server took answering probes meanwhile (at benchIdle's rate).
func (r *run) bareCPU(self, d time.Duration) time.Duration {
	used := selfCPU() - self
	if r.opts.BareBeside && r.benchIdle > 0 {
		used -= time.Duration(float64(r.benchIdle) * d.Seconds() / IdleWindow.Seconds())
	}
	return used
}

// grantBareNamespace gives the controller's ServiceAccount in the bare client's namespace the
// rights on Applications it has in Argo CD's (config/rbac), so that the bare client writes
// there as the controller.
func (r *run) grantBareNamespace() error {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-bare-applications", Namespace: bareNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{argocd.ApplicationGVK.Group}, Resources: []string{"applications"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: bareNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ControllerServiceAccount, Namespace: ControllerNamespace}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := r.admin.Create(r.ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("grant the controller's ServiceAccount Applications in %s: %w", bareNamespace, err)
		}
	}
	return nil
}
