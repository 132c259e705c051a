package serving

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/gate"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// reading is what one reconcile of a Serving reads before it decides anything: the gate's facts
// and the objects behind them.
type reading struct {
	facts   gate.ServingFacts
	order   *v1.Order
	target  target
	project argocd.Project
	prep    *v1.Preparation
}

// read reads the facts the Serving's gate decides from (gate.ServingFacts), in the gate's
// order: it stops where a later read needs what an earlier one did not find, which the gate
// looks at first.
func (r *Reconciler) read(ctx context.Context, s *v1.Serving) (reading, error) {
	in := reading{facts: gate.ServingFacts{ArgoCDNamespace: r.Config.ArgoCDNamespace, Namespace: s.Namespace,
		Order: s.Spec.OrderRef.Name, Preparation: s.Spec.PreparationName, LocalEnabled: r.Config.LocalProject != ""}}
	f := &in.facts
	if f.ArgoCDInstalled = r.ArgoCD.Installed(); !f.ArgoCDInstalled {
		return in, nil
	}
	var ns corev1.Namespace
	found, err := exists(ctx, r.Client, client.ObjectKey{Name: r.Config.ArgoCDNamespace}, &ns, "Argo CD namespace")
	if f.ArgoCDNamespaceFound = found; err != nil || !found {
		return in, err
	}
	in.order = &v1.Order{}
	found, err = exists(ctx, r.Client, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.OrderRef.Name}, in.order, "Order")
	if f.OrderFound = found; err != nil || !found {
		return in, err
	}
	f.Environment = in.order.Spec.EnvironmentRef.Name
	if err := r.readTarget(ctx, &in); err != nil || f.SelectorError != nil || f.Clusters == 0 {
		return in, err
	}
	in.target.pace = in.order.Spec.RolloutPace
	f.Project = in.target.project
	projectObj := &unstructured.Unstructured{}
	projectObj.SetGroupVersionKind(argocd.AppProjectGVK)
	found, err = exists(ctx, r.ArgoCD.Client, client.ObjectKey{Namespace: r.Config.ArgoCDNamespace, Name: in.target.project}, projectObj, "AppProject")
	if f.ProjectFound = found; err != nil || !found {
		return in, err
	}
	if in.project, err = readProject(projectObj); err != nil {
		return in, err
	}
	f.ProjectAdmitsNamespace = in.project.PermitsSourceNamespace(s.Namespace)
	if s.Spec.PreparationName == "" {
		return in, nil
	}
	in.prep = &v1.Preparation{}
	found, err = exists(ctx, r.Client, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.PreparationName}, in.prep, "Preparation")
	if f.PreparationFound = found; found {
		f.PreparationOrder = in.prep.Spec.OrderRef.Name
	}
	return in, err
}

// exists gets key into obj through c: false when it does not exist.
func exists(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object, what string) (bool, error) {
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get %s %q: %w", what, key.Name, err)
	}
	return true, nil
}

// readTarget reads the Environment the Order deploys to, or the Environment local Kokumi
// provides, and the Clusters it selects.
func (r *Reconciler) readTarget(ctx context.Context, in *reading) error {
	f := &in.facts
	name := f.Environment
	var env v1.Environment
	found, err := exists(ctx, r.Client, client.ObjectKey{Namespace: f.Namespace, Name: name}, &env, "Environment")
	if err != nil {
		return err
	}
	if f.EnvironmentFound = found; !found {
		if name == v1.LocalEnvironmentName && f.LocalEnabled {
			in.target = target{environment: name, project: r.Config.LocalProject, clusters: []fleet.Cluster{
				{Name: argocd.InClusterName, Server: v1.InClusterServer, Ready: true},
			}}
			f.Clusters = 1
		}
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(&env.Spec.ClusterSelector)
	if err != nil {
		f.SelectorError = err
		return nil
	}
	var list v1.ClusterList
	// Read-only: the cache's objects are not copied.
	if err := r.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list Clusters of Environment %q: %w", name, err)
	}
	t := target{environment: name, project: env.Spec.Project, rollout: env.Spec.Rollout, env: &env}
	f.GateProblem = verify.Problem(&env)
	if t.rollout != nil {
		t.waves = make(map[string]int, len(list.Items))
	}
	if verify.PerCluster(&env) {
		t.labels = make(map[string]map[string]string, len(list.Items))
	}
	for _, c := range cluster.Members(selector, list.Items) {
		t.clusters = append(t.clusters, cluster.Fleet(c))
		if t.rollout != nil {
			t.waves[c.Name] = rollout.WaveOf(t.rollout, c.Labels)
		}
		if t.labels != nil {
			t.labels[c.Name] = c.Labels
		}
	}
	in.target, f.Clusters = t, len(t.clusters)
	return nil
}

func readProject(u *unstructured.Unstructured) (argocd.Project, error) {
	p := argocd.Project{Name: u.GetName()}
	if spec, ok := u.Object["spec"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &p.Spec); err != nil {
			return p, fmt.Errorf("read AppProject %q: %w", u.GetName(), err)
		}
	}
	return p, nil
}
