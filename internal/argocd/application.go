package argocd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	sigsjson "sigs.k8s.io/json"
)

// Group, version and kinds of Argo CD's API.
var (
	// ApplicationGVK is Argo CD's Application.
	ApplicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}
	// ApplicationListGVK is a list of Argo CD's Applications.
	ApplicationListGVK = ApplicationGVK.GroupVersion().WithKind("ApplicationList")
	// AppProjectGVK is Argo CD's AppProject.
	AppProjectGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "AppProject"}
)

// Argo CD's sync, health and operation values Kokumi reads.
const (
	SyncSynced      = "Synced"
	HealthHealthy   = "Healthy"
	HealthDegraded  = "Degraded"
	OperationFailed = "Failed"
	OperationError  = "Error"
	// SyncOutOfSync is Argo CD's sync status of an Application (or one of its objects) whose
	// live state differs from its target state.
	SyncOutOfSync = "OutOfSync"
	// OperationRunning and OperationSucceeded are phases of a sync operation.
	OperationRunning   = "Running"
	OperationSucceeded = "Succeeded"
	ConditionInvalid   = "InvalidSpecError"
)

// refusals are the Application condition types that mean Argo CD will not sync it as written.
var refusals = map[string]bool{ConditionInvalid: true}

// ApplicationSpec is the desired Application for one cluster.
type ApplicationSpec struct {
	// Name of the Application.
	Name string
	// Namespace is Argo CD's namespace.
	Namespace string
	// ServingNamespace and ServingName are the Serving it deploys; ServingUID is its UID.
	ServingNamespace, ServingName string
	ServingUID                    types.UID
	// Cluster is the Kokumi Cluster it deploys to.
	Cluster string
	// Project is the AppProject.
	Project string
	// RepoURL is oci://registry/repository of the Preparation's artifact.
	RepoURL string
	// Revision is the artifact's digest.
	Revision string
	// Server and TargetNamespace are the destination.
	Server, TargetNamespace string
	// Retry is how Argo CD retries a failed sync; a zero Limit writes no retry.
	Retry SyncRetry
}

// SyncRetry is an Application's syncPolicy.retry: Argo CD does not retry an automated sync that
// failed for the same revision unless told to.
type SyncRetry struct {
	// Limit is how many times a failed sync is retried; 0 writes no retry, -1 retries forever.
	Limit int64
	// Backoff is the first wait, multiplied by Factor after each failure up to MaxBackoff.
	Backoff    time.Duration
	Factor     int64
	MaxBackoff time.Duration
}

// InClusterName is the name of the cluster Kokumi runs in, as Argo CD names it.
const InClusterName = "in-cluster"

// DefaultSyncRetry retries a failed sync five times, waiting 5 s, 10 s, 20 s, 40 s and 80 s.
var DefaultSyncRetry = SyncRetry{Limit: 5, Backoff: 5 * time.Second, Factor: 2, MaxBackoff: 3 * time.Minute}

// Owner is the value of AnnotationOwner for a Serving.
func Owner(servingNamespace, servingName string) string {
	return servingNamespace + "/" + servingName
}

// Build returns the Application as an unstructured object: labels that find it, the owner
// annotation, a spec of the OCI source at the digest, automated sync with prune and self-heal,
// CreateNamespace and nothing else, and no resources finalizer, so deleting it leaves what runs
// in place.
func (s ApplicationSpec) Build() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
		"spec":     s.specMap(),
	}}
	u.SetLabels(s.labels())
	u.SetAnnotations(s.annotations())
	u.SetGroupVersionKind(ApplicationGVK)
	return u
}

// New returns the Application Build returns, typed: what a create sends, encoded without the
// maps of an unstructured object.
func (s ApplicationSpec) New() *Application {
	return &Application{
		TypeMeta:   metav1.TypeMeta{APIVersion: ApplicationGVK.GroupVersion().String(), Kind: ApplicationGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.labels(), Annotations: s.annotations()},
		Spec:       s.fields(),
	}
}

// labels are the labels Build sets: they find the Application by Serving and by Cluster.
func (s ApplicationSpec) labels() map[string]string {
	l := map[string]string{
		LabelServing:          s.ServingName,
		LabelServingNamespace: s.ServingNamespace,
		LabelCluster:          s.Cluster,
		LabelManagedBy:        ManagedByKokumi,
	}
	if s.ServingUID != "" {
		l[LabelServingUID] = string(s.ServingUID)
	}
	return l
}

// annotations are the annotations Build sets: the owner.
func (s ApplicationSpec) annotations() map[string]string {
	return map[string]string{AnnotationOwner: Owner(s.ServingNamespace, s.ServingName)}
}

func (s ApplicationSpec) specMap() map[string]any {
	return map[string]any{
		"project": s.Project,
		"source": map[string]any{
			"repoURL":        s.RepoURL,
			"targetRevision": s.Revision,
			"path":           ".",
		},
		"destination": map[string]any{
			"server":    s.Server,
			"namespace": s.TargetNamespace,
		},
		"syncPolicy": s.syncPolicy(),
	}
}

func (s ApplicationSpec) syncPolicy() map[string]any {
	p := map[string]any{
		"automated":   map[string]any{"prune": true, "selfHeal": true},
		"syncOptions": []any{"CreateNamespace=true"},
	}
	if s.Retry.Limit != 0 {
		p["retry"] = map[string]any{
			"limit": s.Retry.Limit,
			"backoff": map[string]any{
				"duration": s.Retry.Backoff.String(), "factor": s.Retry.Factor, "maxDuration": s.Retry.MaxBackoff.String(),
			},
		}
	}
	return p
}

// fields returns the spec fields Build sets, each as JSON, byte for byte as json.Marshal writes
// specMap's (keys sorted): written directly, since a reconcile asks it of each Application it
// compares or writes, and the sync policy, the same on every Application, is written once.
func (s ApplicationSpec) fields() ApplicationFields {
	b := make([]byte, 0, 64+len(s.RepoURL)+len(s.Revision)+len(s.Server)+2*len(s.TargetNamespace)+len(s.Project))
	b = appendJSONString(b, s.Project)
	project := len(b)
	b = append(b, `{"path":".","repoURL":`...)
	b = appendJSONString(b, s.RepoURL)
	b = append(b, `,"targetRevision":`...)
	b = appendJSONString(b, s.Revision)
	b = append(b, '}')
	source := len(b)
	b = append(b, `{"namespace":`...)
	b = appendJSONString(b, s.TargetNamespace)
	b = append(b, `,"server":`...)
	b = appendJSONString(b, s.Server)
	b = append(b, '}')
	all := string(b)
	return ApplicationFields{Project: RawJSON(all[:project]), Source: RawJSON(all[project:source]),
		Destination: RawJSON(all[source:]), SyncPolicy: s.Retry.policyJSON()}
}

// policyJSON is the syncPolicy of an Application that retries as r, as JSON: written once per r.
func (r SyncRetry) policyJSON() RawJSON {
	if p, ok := syncPolicies.Load(r); ok {
		return p.(RawJSON)
	}
	p := mustJSON(ApplicationSpec{Retry: r}.syncPolicy())
	syncPolicies.Store(r, p)
	return p
}

// syncPolicies holds the syncPolicy JSON of each SyncRetry asked for (a few: the configured one).
var syncPolicies sync.Map

// appendJSONString appends s as a JSON string, as json.Marshal writes it (HTML characters
// escaped too).
func appendJSONString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return append(b, mustJSON(s)...)
}

// mustJSON serializes what specMap builds: strings, numbers, booleans, lists and maps of them.
func mustJSON(v any) RawJSON {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("serialize an Application's spec: %v", err))
	}
	return RawJSON(data)
}

// UpToDate reports whether existing is as Build writes it: the same labels and owner annotation,
// no resources finalizer (CascadeFinalizers), and the spec Kokumi writes, whole. Kokumi owns the
// whole spec: each field it writes (project, source, destination, syncPolicy) is compared whole,
// so that an extra key someone adds inside one, such as source.kustomize.images, is drift; and
// any other spec field, such as sources (which Argo CD deploys instead of source) or
// ignoreDifferences (which hides drift from self-heal), is drift too. Other labels, annotations
// and finalizers, and the status, are ignored.
func (s ApplicationSpec) UpToDate(existing *Application) bool {
	for k, v := range s.labels() {
		if existing.Labels[k] != v {
			return false
		}
	}
	for k, v := range s.annotations() {
		if existing.Annotations[k] != v {
			return false
		}
	}
	if Cascades(existing) {
		return false
	}
	have, wanted := existing.Spec, s.fields()
	return len(have.Others) == 0 && sameJSON(have.Project, wanted.Project) && sameJSON(have.Source, wanted.Source) &&
		sameJSON(have.Destination, wanted.Destination) && sameJSON(have.SyncPolicy, wanted.SyncPolicy)
}

// sameJSON reports whether have serializes as want does, which json.Marshal wrote (maps with
// sorted keys): the same bytes, or the same once have is decoded and serialized again.
func sameJSON(have, want RawJSON) bool {
	if have == want {
		return true
	}
	var v any
	if have == "" || json.Unmarshal([]byte(have), &v) != nil {
		return false
	}
	again, err := json.Marshal(v)
	return err == nil && string(again) == string(want)
}

// Apply copies what Build sets onto existing, keeping its other labels, annotations and
// finalizers, drops the resources finalizers (CascadeFinalizers), and replaces the whole spec:
// the spec fields Kokumi does not write (ApplicationFields.Others) go, and a merge patch from
// existing names each of them null.
func (s ApplicationSpec) Apply(existing *Application) {
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for k, v := range s.labels() {
		existing.Labels[k] = v
	}
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	for k, v := range s.annotations() {
		existing.Annotations[k] = v
	}
	existing.Finalizers = WithoutCascade(existing.Finalizers)
	existing.Spec = s.fields()
}

// CascadeFinalizers are the finalizers by which Argo CD deletes what an Application deployed
// when the Application is deleted: ResourcesFinalizer and its foreground and background
// variants (Argo CD's isPropagationPolicyFinalizer). Kokumi's Applications carry none, so that
// deleting one leaves what runs on its cluster in place.
var CascadeFinalizers = []string{ResourcesFinalizer, ResourcesFinalizerForeground, ResourcesFinalizerBackground}

// Cascades reports whether app carries one of CascadeFinalizers: deleting it as it is would
// make Argo CD delete what it deployed.
func Cascades(app metav1.Object) bool {
	return slices.ContainsFunc(app.GetFinalizers(), isCascade)
}

// WithoutCascade returns finalizers without CascadeFinalizers, in their order; nil when none is left.
func WithoutCascade(finalizers []string) []string {
	var out []string
	for _, f := range finalizers {
		if !isCascade(f) {
			out = append(out, f)
		}
	}
	return out
}

func isCascade(finalizer string) bool { return slices.Contains(CascadeFinalizers, finalizer) }

// IsKokumis reports whether an Application belongs to the Serving: only such an Application
// is ever changed or deleted.
func IsKokumis(app metav1.Object, servingNamespace, servingName string) bool {
	return isOwner(app.GetAnnotations()[AnnotationOwner], servingNamespace, servingName) &&
		app.GetLabels()[LabelManagedBy] == ManagedByKokumi
}

// isOwner reports whether owner is Owner(servingNamespace, servingName), without building it:
// a reconcile asks it of each of a fleet's Applications.
func isOwner(owner, servingNamespace, servingName string) bool {
	n := len(servingNamespace)
	return len(owner) == n+1+len(servingName) && owner[:n] == servingNamespace && owner[n] == '/' && owner[n+1:] == servingName
}

// BelongsTo reports whether app is serving's own: Kokumi's, for the Serving's namespace and
// name, and written for this very Serving (its UID), or before Kokumi labelled Applications with
// the UID (adopted, and labelled at the next write). Only such an Application is changed, or
// deleted by the Serving's reconcile.
func BelongsTo(app, serving metav1.Object) bool {
	if !IsKokumis(app, serving.GetNamespace(), serving.GetName()) {
		return false
	}
	uid := app.GetLabels()[LabelServingUID]
	return uid == "" || uid == string(serving.GetUID())
}

// Orphaned reports whether app, which Kokumi labelled for the Serving of namespace/name, was
// left by a Serving that is gone: serving, what the API server holds under that name, is nil,
// or another Serving of the same name, made after the one the Application was written for.
// Such an Application is deleted (what runs on its cluster keeps running): it would otherwise
// keep syncing what no Serving, Environment or AppProject governs any more.
func Orphaned(app metav1.Object, namespace, name string, serving metav1.Object) bool {
	if !IsKokumis(app, namespace, name) {
		return false
	}
	if serving == nil {
		return true
	}
	uid := app.GetLabels()[LabelServingUID]
	return uid != "" && uid != string(serving.GetUID())
}

// Condition is one of an Application's status.conditions.
type Condition struct {
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
}

// Status is the part of an Application's status Kokumi reads.
type Status struct {
	Sync struct {
		Status   string `json:"status,omitempty"`
		Revision string `json:"revision,omitempty"`
	} `json:"sync,omitempty"`
	Health struct {
		Status             string `json:"status,omitempty"`
		Message            string `json:"message,omitempty"`
		LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	} `json:"health,omitempty"`
	OperationState *OperationState `json:"operationState,omitempty"`
	Conditions     []Condition     `json:"conditions,omitempty"`
	// LastDeployed is the revision of status.history's newest entry: what Argo CD last
	// deployed. The rest of the history is not kept.
	LastDeployed string `json:"-"`
	// OutOfSync names the objects of status.resources Argo CD reports OutOfSync, at most
	// MaxOutOfSyncNames of them; nil when none is. The rest of the list is not kept.
	OutOfSync *OutOfSync `json:"-"`
}

// MaxOutOfSyncNames is how many names of OutOfSync objects an Application's cached status keeps.
const MaxOutOfSyncNames = 10

// OutOfSync is what Kokumi keeps of the objects Argo CD reports OutOfSync in an Application's
// status.resources: the first MaxOutOfSyncNames of them as Kind/name, and how many there are.
type OutOfSync struct {
	Names []string
	Count int
}

// UnmarshalJSON reads the status Kokumi keeps (Status) and, of status.history and
// status.resources, only the newest deployed revision and the OutOfSync objects' names.
func (st *Status) UnmarshalJSON(data []byte) error {
	type plain Status
	var w struct {
		plain
		History []struct {
			Revision string `json:"revision"`
		} `json:"history"`
		Resources []resourceEntry `json:"resources"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &w); err != nil {
		return fmt.Errorf("decode an Application's status: %w", err)
	}
	*st = Status(w.plain)
	if n := len(w.History); n > 0 {
		st.LastDeployed = w.History[n-1].Revision
	}
	for _, r := range w.Resources {
		if r.outOfSync == "" {
			continue
		}
		if st.OutOfSync == nil {
			st.OutOfSync = &OutOfSync{}
		}
		st.OutOfSync.Count++
		if len(st.OutOfSync.Names) < MaxOutOfSyncNames {
			st.OutOfSync.Names = append(st.OutOfSync.Names, r.outOfSync)
		}
	}
	return nil
}

// resourceEntry is one entry of status.resources as Kokumi reads it: Kind/name when Argo CD
// reports the object OutOfSync, else nothing. An entry that does not name OutOfSync, as most
// do, is not decoded at all: nothing of it is allocated.
type resourceEntry struct{ outOfSync string }

// outOfSyncValue is the sync status an entry names when it is out of sync.
var outOfSyncValue = []byte(`"` + SyncOutOfSync + `"`)

// UnmarshalJSON reads the entry's kind and name when its status is OutOfSync.
func (r *resourceEntry) UnmarshalJSON(data []byte) error {
	if !bytes.Contains(data, outOfSyncValue) {
		return nil
	}
	var e struct {
		Kind   string `json:"kind"`
		Name   string `json:"name"`
		Status string `json:"status"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &e); err != nil {
		return fmt.Errorf("decode an entry of an Application's status.resources: %w", err)
	}
	if e.Status == SyncOutOfSync {
		r.outOfSync = e.Kind + "/" + e.Name
	}
	return nil
}

// DeployedAt reports whether Argo CD's last deployment was of revision: the newest entry of
// status.history, or else the last sync operation, which Succeeded.
func (st Status) DeployedAt(revision string) bool {
	if st.LastDeployed != "" {
		return SameRevision(st.LastDeployed, revision)
	}
	op := st.OperationState
	return op != nil && op.Phase == OperationSucceeded && SameRevision(op.Operation.Sync.Revision, revision)
}

// OperationRunning reports whether a sync operation is under way.
func (st Status) OperationRunning() bool {
	return st.OperationState != nil && st.OperationState.Phase == OperationRunning
}

// OperationState is the last sync operation Argo CD ran.
type OperationState struct {
	Phase     string `json:"phase,omitempty"`
	Message   string `json:"message,omitempty"`
	Operation struct {
		Sync struct {
			Revision string `json:"revision,omitempty"`
		} `json:"sync,omitempty"`
	} `json:"operation,omitempty"`
}

// Refusal returns Argo CD's message when it refuses the Application as written, such as a
// destination its project does not permit, and whether it does.
func (st Status) Refusal() (string, bool) {
	for _, c := range st.Conditions {
		if refusals[c.Type] {
			return c.Message, true
		}
	}
	return "", false
}

// Error returns Argo CD's first error condition (a type ending in "Error", as Argo CD classes
// them, such as ComparisonError or SyncError) as "Type: message", and whether there is one.
func (st Status) Error() (string, bool) {
	for _, c := range st.Conditions {
		if strings.HasSuffix(c.Type, "Error") {
			return c.Type + ": " + c.Message, true
		}
	}
	return "", false
}

// FirstCondition returns the message of the Application's first condition, such as a
// ComparisonError while Argo CD cannot fetch the artifact, or "" when it has none.
func (st Status) FirstCondition() string {
	if len(st.Conditions) == 0 {
		return ""
	}
	return st.Conditions[0].Type + ": " + st.Conditions[0].Message
}

// SyncFailure returns the message of a sync operation that failed at revision, and whether one did.
func (st Status) SyncFailure(revision string) (string, bool) {
	op := st.OperationState
	if op == nil || (op.Phase != OperationFailed && op.Phase != OperationError) {
		return "", false
	}
	if r := op.Operation.Sync.Revision; r != "" && !SameRevision(r, revision) {
		return "", false
	}
	return op.Message, true
}

// HealthyAt reports whether the Application runs revision synced and healthy.
func (st Status) HealthyAt(revision string) bool {
	return st.Sync.Status == SyncSynced && st.Health.Status == HealthHealthy && SameRevision(st.Sync.Revision, revision)
}

// SameRevision reports whether two non-empty revisions name the same digest, with or without
// their "sha256:" prefix.
func SameRevision(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "sha256:") == strings.TrimPrefix(b, "sha256:")
}
