package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// LabelShard assigns an Order, Serving, Preparation or Product to the controller replica started
// with --shard set to its value; a replica without --shard (the main shard) reconciles those
// without the label. Kokumi copies it from an Order onto the Preparations and Serving it creates,
// and from a Serving onto its Argo CD Applications.
const LabelShard = "delivery.kokumi.dev/shard"

// Values of Config.Shard besides a shard's name.
const (
	// AllShards reads every object whatever its label, and does the shared work: the API
	// server, `kokumi dev` and tests that build a manager without saying run so. It is
	// Config's zero value.
	AllShards = ""
	// MainShard reconciles the objects without LabelShard and does the shared work (Cluster
	// probing, Argo CD cluster Secrets, Environment status, the bundled registry's
	// credentials): `kokumi controller` without --shard.
	MainShard = "-"
)

// CheckShard refuses a shard name that is not a label value.
func CheckShard(shard string) error {
	if shard == AllShards || shard == MainShard {
		return nil
	}
	if msgs := validation.IsValidLabelValue(shard); len(msgs) > 0 || shard == "" {
		return fmt.Errorf("--shard=%q is not a label value: %v", shard, msgs)
	}
	return nil
}

// namedShard reports whether shard names a shard (neither all nor main).
func namedShard(shard string) bool { return shard != AllShards && shard != MainShard }

// shardRequirement is the label requirement of a shard's objects, or nil for AllShards.
func shardRequirement(shard string) *labels.Requirement {
	var r *labels.Requirement
	switch shard {
	case AllShards:
		return nil
	case MainShard:
		r, _ = labels.NewRequirement(LabelShard, selection.DoesNotExist, nil)
	default:
		r, _ = labels.NewRequirement(LabelShard, selection.Equals, []string{shard})
	}
	return r
}

// shardedKinds are the namespaced delivery kinds shards split: each replica caches only its own.
func shardedKinds() []client.Object {
	return []client.Object{&v1.Order{}, &v1.Serving{}, &v1.Preparation{}, &v1.Product{}}
}

// shardCacheOptions adds to o the label selector of the shard's delivery objects.
func shardCacheOptions(o cache.Options, shard string) cache.Options {
	r := shardRequirement(shard)
	if r == nil {
		return o
	}
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	for _, kind := range shardedKinds() {
		o.ByObject[kind] = cache.ByObject{Label: labels.NewSelector().Add(*r)}
	}
	return o
}

// leaderElectionID is the lease of the shard's replicas: one leader per shard.
func leaderElectionID(shard string) string {
	if namedShard(shard) {
		return "kokumi-controller-" + shard + ".delivery.kokumi.dev"
	}
	return "kokumi-controller.delivery.kokumi.dev"
}

// FieldManager is the name a replica of shard writes as: the manager in managedFields, and its
// client's user agent. The main shard (and a manager of all shards) writes as "kokumi".
func FieldManager(shard string) string {
	if namedShard(shard) {
		return "kokumi-shard-" + shard
	}
	return "kokumi"
}

// shardConfig returns a copy of cfg whose requests carry the shard's identity: the API server
// names the field manager of an Update, Create or merge Patch after the user agent.
func shardConfig(cfg *rest.Config, shard string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = FieldManager(shard) + "/" + rest.DefaultKubernetesUserAgent()
	return c
}

// sharedWork reports whether a replica of shard does the work that must run once (every setup):
// a named shard runs only the reconcilers of its delivery objects (shardedSetups).
func sharedWork(shard string) bool { return !namedShard(shard) }

// shardedSetups are the reconcilers a named shard runs: those of its Orders, Servings and their
// Preparations (the collection of an Order's old Preparations among them).
var shardedSetups = []Setup{setupOrder, SetupServing, SetupGC}

// withShard adds the Order's LabelShard, if any, to labels: what an Order creates (its
// Preparations, its Serving) stays in its shard.
func withShard(order client.Object, labels map[string]string) map[string]string {
	shard, ok := order.GetLabels()[LabelShard]
	if !ok {
		return labels
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelShard] = shard
	return labels
}

// setApplicationShard labels an Application with the replica's shard, so that the shard's cache
// (applicationSelector) holds it; the main shard's carry no label.
func setApplicationShard(app client.Object, shard string) {
	l := app.GetLabels()
	if namedShard(shard) {
		if l == nil {
			l = map[string]string{}
		}
		l[LabelShard] = shard
	} else if _, ok := l[LabelShard]; ok {
		delete(l, LabelShard)
	} else {
		return
	}
	app.SetLabels(l)
}

// applicationInShard reports whether an Application carries the shard's label as
// setApplicationShard writes it.
func applicationInShard(app client.Object, shard string) bool {
	v, ok := app.GetLabels()[LabelShard]
	if namedShard(shard) {
		return v == shard
	}
	return !ok
}

// logShard logs which shard a manager runs.
func logShard(shard string) {
	switch shard {
	case AllShards:
	case MainShard:
		ctrl.Log.Info("main shard: reconciling delivery objects without label "+LabelShard+", and the shared work", "fieldManager", FieldManager(shard))
	default:
		ctrl.Log.Info("shard "+shard+": reconciling delivery objects labelled "+LabelShard+"="+shard, "fieldManager", FieldManager(shard))
	}
}
