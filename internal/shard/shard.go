// Package shard splits the namespaced delivery kinds among controller replicas: the label that
// assigns an object to a shard, the selectors, leases and field managers of each shard.
package shard

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Label assigns an Order, Serving, Preparation or Product to the controller replica started
// with --shard set to its value; a replica without --shard (the main shard) reconciles those
// without the label. Kokumi copies it from an Order onto the Preparations and Serving it creates,
// and from a Serving onto its Argo CD Applications.
const Label = "delivery.kokumi.dev/shard"

// Values of Config.Shard besides a shard's name.
const (
	// All reads every object whatever its label, and does the shared work: the API
	// server, `kokumi dev` and tests that build a manager without saying run so. It is
	// Config's zero value.
	All = ""
	// Main reconciles the objects without Label and does the shared work (Cluster
	// probing, Argo CD cluster Secrets, Environment status, the bundled registry's
	// credentials): `kokumi controller` without --shard.
	Main = "-"
)

// Check refuses a shard name that is not a label value.
func Check(shard string) error {
	if shard == All || shard == Main {
		return nil
	}
	if msgs := validation.IsValidLabelValue(shard); len(msgs) > 0 || shard == "" {
		return fmt.Errorf("--shard=%q is not a label value: %v", shard, msgs)
	}
	return nil
}

// Named reports whether shard names a shard (neither all nor main).
func Named(shard string) bool { return shard != All && shard != Main }

// Requirement is the label requirement of a shard's objects, or nil for All.
func Requirement(shard string) *labels.Requirement {
	var r *labels.Requirement
	switch shard {
	case All:
		return nil
	case Main:
		r, _ = labels.NewRequirement(Label, selection.DoesNotExist, nil)
	default:
		r, _ = labels.NewRequirement(Label, selection.Equals, []string{shard})
	}
	return r
}

// Kinds are the namespaced delivery kinds shards split: each replica caches only its own.
func Kinds() []client.Object {
	return []client.Object{&v1.Order{}, &v1.Serving{}, &v1.Preparation{}, &v1.Product{}}
}

// CacheOptions adds to o the label selector of the shard's delivery objects.
func CacheOptions(o cache.Options, shard string) cache.Options {
	r := Requirement(shard)
	if r == nil {
		return o
	}
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	for _, kind := range Kinds() {
		o.ByObject[kind] = cache.ByObject{Label: labels.NewSelector().Add(*r)}
	}
	return o
}

// LeaderElectionID is the lease of the shard's replicas: one leader per shard.
func LeaderElectionID(shard string) string {
	if Named(shard) {
		return "kokumi-controller-" + shard + ".delivery.kokumi.dev"
	}
	return "kokumi-controller.delivery.kokumi.dev"
}

// FieldManager is the name a replica of shard writes as: the manager in managedFields, and its
// client's user agent. The main shard (and a manager of all shards) writes as "kokumi".
func FieldManager(shard string) string {
	if Named(shard) {
		return "kokumi-shard-" + shard
	}
	return "kokumi"
}

// RESTConfig returns a copy of cfg whose requests carry the shard's identity: the API server
// names the field manager of an Update, Create or merge Patch after the user agent.
func RESTConfig(cfg *rest.Config, shard string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = FieldManager(shard) + "/" + rest.DefaultKubernetesUserAgent()
	return c
}

// SharedWork reports whether a replica of shard does the work that must run once (every setup):
// a named shard runs only the reconcilers of its delivery objects (shardedSetups).
func SharedWork(shard string) bool { return !Named(shard) }

// Inherit adds the Order's Label, if any, to labels: what an Order creates (its
// Preparations, its Serving) stays in its shard.
func Inherit(order client.Object, labels map[string]string) map[string]string {
	shard, ok := order.GetLabels()[Label]
	if !ok {
		return labels
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[Label] = shard
	return labels
}

// SetApplication labels an Application with the replica's shard, so that the shard's cache
// (applicationSelector) holds it; the main shard's carry no label.
func SetApplication(app client.Object, shard string) {
	l := app.GetLabels()
	if Named(shard) {
		if l == nil {
			l = map[string]string{}
		}
		l[Label] = shard
	} else if _, ok := l[Label]; ok {
		delete(l, Label)
	} else {
		return
	}
	app.SetLabels(l)
}

// ApplicationIn reports whether an Application carries the shard's label as
// SetApplication writes it.
func ApplicationIn(app client.Object, shard string) bool {
	v, ok := app.GetLabels()[Label]
	if Named(shard) {
		return v == shard
	}
	return !ok
}

// Log logs which shard a manager runs.
func Log(shard string) {
	switch shard {
	case All:
	case Main:
		ctrl.Log.Info("main shard: reconciling delivery objects without label "+Label+", and the shared work", "fieldManager", FieldManager(shard))
	default:
		ctrl.Log.Info("shard "+shard+": reconciling delivery objects labelled "+Label+"="+shard, "fieldManager", FieldManager(shard))
	}
}

// ApplicationSelector selects the Applications a replica caches: Kokumi's own
// (app.kubernetes.io/managed-by=kokumi), of the replica's shard (see config.Config.Shard).
func ApplicationSelector(shard string) labels.Selector {
	kokumis, _ := labels.NewRequirement(argocd.LabelManagedBy, selection.Equals, []string{argocd.ManagedByKokumi})
	sel := labels.NewSelector().Add(*kokumis)
	if r := Requirement(shard); r != nil {
		sel = sel.Add(*r)
	}
	return sel
}
