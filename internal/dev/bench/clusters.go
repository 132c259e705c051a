package bench

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
)

// offboard deletes the N Clusters and their credentials Secrets, as a person removing the fleet
// would, and times it until no Cluster is left: the controller deletes each one's Argo CD
// cluster Secret before it lets the Cluster go.
func (r *run) offboard(alive func() error) (time.Duration, error) {
	start := time.Now()
	if err := parallel(r.opts.BareWorkers, r.opts.N, func(i int) error {
		return r.deleteCluster(ClusterName(i))
	}); err != nil {
		return 0, err
	}
	return waitCount(r.ctx, start, r.opts.Timeout, "no Cluster left", 0, r.with(r.obs.clusters), alive)
}

// deleteCluster deletes the Cluster name and its credentials Secret.
func (r *run) deleteCluster(name string) error {
	if err := r.admin.Delete(r.ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return fmt.Errorf("delete Cluster %s: %w", name, err)
	}
	if err := r.admin.Delete(r.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace}}); err != nil {
		return fmt.Errorf("delete the credentials of %s: %w", name, err)
	}
	return nil
}

// bareOnboard is the floor of onboarding N Clusters, with the controller stopped: the bare
// client's workers create each Cluster and its credentials Secret as the harness does for
// Kokumi, then do what the controller does for it, with the same code where there is code to
// share: read the credentials, check them with a GET of the member's /version (a new
// connection, as a first probe makes), create its Argo CD cluster Secret, add the finalizer and
// write the Ready condition. Timed until an informer sees all N Ready.
func (r *run) bareOnboard() (time.Duration, error) {
	start := time.Now()
	if err := parallel(r.opts.BareWorkers, r.opts.N, func(i int) error {
		name := ClusterName(i)
		if err := r.createCluster(name, environmentName); err != nil {
			return err
		}
		var c v1.Cluster
		if err := r.admin.Get(r.ctx, client.ObjectKey{Name: name}, &c); err != nil {
			return fmt.Errorf("get Cluster %s: %w", name, err)
		}
		creds, err := cluster.ParseSecret(map[string][]byte{cluster.KeyToken: []byte(Token(name)), cluster.KeyCA: r.members.CA})
		if err != nil {
			return fmt.Errorf("parse the credentials of %s: %w", name, err)
		}
		res := cluster.Probe(r.ctx, c.Spec.Server, creds, 10*time.Second)
		if !res.Connected() {
			return fmt.Errorf("check the credentials of %s: %s", name, res.Message)
		}
		if err := r.admin.Create(r.ctx, cluster.ArgoCDSecret(argocdNamespace, name, c.Spec.Server, creds)); err != nil {
			return fmt.Errorf("create the Argo CD cluster Secret of %s: %w", name, err)
		}
		c.Finalizers = append(c.Finalizers, cluster.Finalizer)
		if err := r.admin.Update(r.ctx, &c); err != nil {
			return fmt.Errorf("add the finalizer to Cluster %s: %w", name, err)
		}
		base := c.DeepCopy()
		now := metav1.Now()
		c.Status.LastProbeTime, c.Status.Version, c.Status.ObservedGeneration = &now, res.Version, c.Generation
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: res.Reason, Message: res.Message, ObservedGeneration: c.Generation})
		if err := r.admin.Status().Patch(r.ctx, &c, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("write the status of Cluster %s: %w", name, err)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	return waitCount(r.ctx, start, r.opts.Timeout, "the bare client's Clusters Ready", r.opts.N, r.with(r.obs.readyClusters), nil)
}

// bareOffboard is the floor of offboarding them: the bare client's workers delete each Cluster
// and its credentials Secret as the harness does for Kokumi, then do what the controller does:
// delete the Argo CD cluster Secret and remove the finalizer. Timed until no Cluster is left.
func (r *run) bareOffboard() (time.Duration, error) {
	start := time.Now()
	if err := parallel(r.opts.BareWorkers, r.opts.N, func(i int) error {
		name := ClusterName(i)
		if err := r.deleteCluster(name); err != nil {
			return err
		}
		if err := r.admin.Delete(r.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.SecretName(name), Namespace: argocdNamespace}}); err != nil {
			return fmt.Errorf("delete the Argo CD cluster Secret of %s: %w", name, err)
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := r.admin.Patch(r.ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}, patch); err != nil {
			return fmt.Errorf("remove the finalizer of Cluster %s: %w", name, err)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	return waitCount(r.ctx, start, r.opts.Timeout, "none of the bare client's Clusters left", 0, r.with(r.obs.clusters), nil)
}
