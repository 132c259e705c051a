package argocd

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
)

// LastAppliedAnnotation is kubectl's copy of what it last applied: Kokumi never reads it.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Application is an Argo CD Application as Kokumi reads it, and what Kokumi's cache of Argo CD's
// namespace holds: its metadata without managedFields and kubectl's last-applied annotation, its
// spec (the four fields Kokumi writes, and any other someone added, each as the JSON the API
// server sent, so that a key someone adds inside one, such as source.kustomize.images, or beside
// them, such as sources, is still seen), and the part of its status Kokumi and its pages read
// (Status).
//
// Everything else is skipped while the API server's JSON is decoded, and never allocated: what
// makes a real Application 20 KB and more (operationState.syncResult; status.summary; the
// top-level operation), but for status.resources (one entry per Kubernetes object deployed) and
// status.history, each decoded to the few fields Kokumi reads and dropped then: of the first
// only the names of at most MaxOutOfSyncNames OutOfSync objects and their count are kept, of the
// second only the newest revision (Status.UnmarshalJSON).
// An Application cached so takes about 1.3 KB of heap, what many Applications share (see intern)
// held once.
//
// It is never written back whole: the Application CRD has no status subresource, and writing
// it would wipe Argo CD's status and the fields it skipped. Kokumi changes Applications with a
// merge patch between two of these, which names only the fields it changes.
type Application struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the spec: what Kokumi writes, and what it does not.
	Spec ApplicationFields `json:"spec"`
	// Status is what Kokumi reads of the status.
	Status Status `json:"status,omitzero"`
}

// ApplicationFields is an Application's spec: the fields Kokumi writes, each whole as JSON, and
// the others, which Kokumi never writes and removes (ApplicationSpec.UpToDate, Apply).
type ApplicationFields struct {
	Project     RawJSON `json:"project,omitempty"`
	Source      RawJSON `json:"source,omitempty"`
	Destination RawJSON `json:"destination,omitempty"`
	SyncPolicy  RawJSON `json:"syncPolicy,omitempty"`
	// Others are the spec's other fields by key, such as sources, ignoreDifferences, info,
	// revisionHistoryLimit or sourceHydrator; nil when there are none, as on every Application
	// Kokumi wrote. Serialized beside the four above, so that a merge patch from an Application
	// that has them to one that has not names each of them null.
	Others map[string]RawJSON `json:"-"`
}

// known returns the fields Kokumi writes by their keys in the spec.
func (f *ApplicationFields) known() map[string]*RawJSON {
	return map[string]*RawJSON{"project": &f.Project, "source": &f.Source, "destination": &f.Destination, "syncPolicy": &f.SyncPolicy}
}

// UnmarshalJSON reads the four fields Kokumi writes and keeps every other key in Others; keys
// are case-sensitive, and a null is no value.
func (f *ApplicationFields) UnmarshalJSON(data []byte) error {
	var all map[string]RawJSON
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &all); err != nil {
		return fmt.Errorf("decode an Application's spec: %w", err)
	}
	*f = ApplicationFields{}
	known := f.known()
	for k, v := range all {
		if p, ok := known[k]; ok {
			*p = v
			continue
		}
		if v == "" {
			continue
		}
		if f.Others == nil {
			f.Others = map[string]RawJSON{}
		}
		f.Others[unique.Make(k).Value()] = v
	}
	return nil
}

// MarshalJSON writes the four fields Kokumi writes and Others as one object, without the empty ones.
func (f ApplicationFields) MarshalJSON() ([]byte, error) {
	all := make(map[string]RawJSON, len(f.Others)+4)
	for k, v := range f.Others {
		all[k] = v
	}
	for k, p := range f.known() {
		if *p != "" {
			all[k] = *p
		} else {
			delete(all, k)
		}
	}
	data, err := json.Marshal(all)
	if err != nil {
		return nil, fmt.Errorf("encode an Application's spec: %w", err)
	}
	return data, nil
}

// DeepCopy copies the spec; the values are immutable strings, the map of Others is copied.
func (f ApplicationFields) DeepCopy() ApplicationFields {
	out := f
	out.Others = maps.Clone(f.Others)
	return out
}

// RawJSON is a JSON value kept as the text it was read from (empty for none or null), interned:
// the sync policy every Application of Kokumi's carries, a Serving's source and a cluster's
// destination are held once however many Applications share them.
type RawJSON string

// MarshalJSON writes the value as it was read.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if r == "" {
		return []byte("null"), nil
	}
	return []byte(r), nil
}

// UnmarshalJSON keeps the value's text.
func (r *RawJSON) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*r = ""
		return nil
	}
	*r = RawJSON(unique.Make(string(data)).Value())
	return nil
}

// ApplicationList is a list of Applications as Kokumi reads them.
type ApplicationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Application `json:"items"`
}

// skipped is a JSON value decoded into nothing: the decoder scans it and allocates none of it.
type skipped struct{}

// UnmarshalJSON skips the value.
func (*skipped) UnmarshalJSON([]byte) error { return nil }

// UnmarshalJSON decodes what Kokumi reads of an Application (see Application), case-sensitive
// as the API machinery decodes, skipping managedFields and the last-applied annotation.
func (a *Application) UnmarshalJSON(data []byte) error {
	var w struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			metav1.ObjectMeta `json:",inline"`
			// Shadows ObjectMeta's: the shallower field wins.
			ManagedFields *skipped `json:"managedFields,omitempty"`
		} `json:"metadata"`
		Spec   ApplicationFields `json:"spec"`
		Status Status            `json:"status"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &w); err != nil {
		return fmt.Errorf("decode Argo CD Application: %w", err)
	}
	a.TypeMeta, a.ObjectMeta, a.Spec, a.Status = w.TypeMeta, w.Metadata.ObjectMeta, w.Spec, w.Status
	delete(a.Annotations, LastAppliedAnnotation)
	a.intern()
	return nil
}

// intern makes the strings that many Applications share one copy each: the namespace, labels
// and annotations (a Serving's, a Cluster's) and the status Argo CD reports (the same words and
// revisions on every cluster of a Serving). A cache of 100,000 Applications holds each once,
// not 100,000 times. Names, UIDs and resource versions, each an Application's own, are not.
func (a *Application) intern() {
	a.Namespace = unique.Make(a.Namespace).Value()
	a.Labels = internMap(a.Labels)
	a.Annotations = internMap(a.Annotations)
	for i, f := range a.Finalizers {
		a.Finalizers[i] = unique.Make(f).Value()
	}
	st := &a.Status
	for _, p := range []*string{&st.Sync.Status, &st.Sync.Revision, &st.Health.Status, &st.Health.Message, &st.Health.LastTransitionTime} {
		*p = unique.Make(*p).Value()
	}
	for i := range st.Conditions {
		st.Conditions[i].Type, st.Conditions[i].Message = unique.Make(st.Conditions[i].Type).Value(), unique.Make(st.Conditions[i].Message).Value()
	}
	if op := st.OperationState; op != nil {
		op.Phase, op.Message = unique.Make(op.Phase).Value(), unique.Make(op.Message).Value()
		op.Operation.Sync.Revision = unique.Make(op.Operation.Sync.Revision).Value()
	}
	st.LastDeployed = unique.Make(st.LastDeployed).Value()
	if o := st.OutOfSync; o != nil {
		for i, n := range o.Names {
			o.Names[i] = unique.Make(n).Value()
		}
	}
}

// internMap returns m with its keys and values interned; the decoder's copy becomes garbage.
func internMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[unique.Make(k).Value()] = unique.Make(v).Value()
	}
	return out
}

// ApplicationFrom reads an unstructured Application as Kokumi reads it.
func ApplicationFrom(u *unstructured.Unstructured) (*Application, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode Application %s: %w", u.GetName(), err)
	}
	app := &Application{}
	if err := json.Unmarshal(data, app); err != nil {
		return nil, fmt.Errorf("read Application %s: %w", u.GetName(), err)
	}
	return app, nil
}

// AddToScheme registers Application and ApplicationList for Argo CD's kind: clients and caches of
// the scheme read Applications as Kokumi does.
func AddToScheme(s *runtime.Scheme) error {
	gv := ApplicationGVK.GroupVersion()
	s.AddKnownTypeWithName(ApplicationGVK, &Application{})
	s.AddKnownTypeWithName(ApplicationListGVK, &ApplicationList{})
	metav1.AddToGroupVersion(s, gv)
	return nil
}

// DeepCopyObject copies the Application.
func (a *Application) DeepCopyObject() runtime.Object { return a.DeepCopy() }

// DeepCopy copies the Application.
func (a *Application) DeepCopy() *Application {
	if a == nil {
		return nil
	}
	out := &Application{TypeMeta: a.TypeMeta, Spec: a.Spec.DeepCopy(), Status: a.Status.deepCopy()}
	a.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject copies the list.
func (l *ApplicationList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopy copies the list.
func (l *ApplicationList) DeepCopy() *ApplicationList {
	if l == nil {
		return nil
	}
	out := &ApplicationList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Application, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

func (st Status) deepCopy() Status {
	out := st
	if st.OperationState != nil {
		op := *st.OperationState
		out.OperationState = &op
	}
	if st.Conditions != nil {
		out.Conditions = append([]Condition(nil), st.Conditions...)
	}
	if st.OutOfSync != nil {
		o := OutOfSync{Names: slices.Clone(st.OutOfSync.Names), Count: st.OutOfSync.Count}
		out.OutOfSync = &o
	}
	return out
}

var _ runtime.Object = &Application{}

// TargetRevision returns the spec.source.targetRevision of the Application: the revision it
// deploys, synced or not; empty when it has none.
func (a *Application) TargetRevision() string {
	if a.Spec.Source == "" {
		return ""
	}
	var src struct {
		TargetRevision string `json:"targetRevision"`
	}
	if err := json.Unmarshal([]byte(a.Spec.Source), &src); err != nil {
		return ""
	}
	return src.TargetRevision
}
