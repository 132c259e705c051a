package argocd

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
)

// LastAppliedAnnotation is kubectl's copy of what it last applied: Kokumi never reads it.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Application is an Argo CD Application as Kokumi reads it, and what Kokumi's cache of Argo CD's
// namespace holds: its metadata without managedFields and kubectl's last-applied annotation, the
// four spec fields Kokumi writes (each as the JSON the API server sent, so that a key someone
// adds inside one, such as source.kustomize.images, is still seen), and the part of its status
// Kokumi and its pages read (Status).
//
// Everything else is skipped while the API server's JSON is decoded, and never allocated: what
// makes a real Application 20 KB and more (status.resources, one entry per Kubernetes object
// deployed; status.history; operationState.syncResult; status.summary; the top-level operation)
// and the spec fields Kokumi does not write. An Application cached so takes about 3 KB of heap.
//
// It is never written back whole: the Application CRD has no status subresource, and writing
// it would wipe Argo CD's status and the fields it skipped. Kokumi changes Applications with a
// merge patch between two of these, which names only the fields it changes.
type Application struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is what Kokumi writes of the spec.
	Spec ApplicationFields `json:"spec"`
	// Status is what Kokumi reads of the status.
	Status Status `json:"status,omitzero"`
}

// ApplicationFields are the fields of an Application's spec Kokumi writes, each whole as JSON.
type ApplicationFields struct {
	Project     json.RawMessage `json:"project,omitempty"`
	Source      json.RawMessage `json:"source,omitempty"`
	Destination json.RawMessage `json:"destination,omitempty"`
	SyncPolicy  json.RawMessage `json:"syncPolicy,omitempty"`
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
	if _, ok := a.Annotations[LastAppliedAnnotation]; ok {
		delete(a.Annotations, LastAppliedAnnotation)
	}
	return nil
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
	out := &Application{TypeMeta: a.TypeMeta, Spec: a.Spec.deepCopy(), Status: a.Status.deepCopy()}
	a.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
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
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Application, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

func (f ApplicationFields) deepCopy() ApplicationFields {
	return ApplicationFields{Project: bytes.Clone(f.Project), Source: bytes.Clone(f.Source),
		Destination: bytes.Clone(f.Destination), SyncPolicy: bytes.Clone(f.SyncPolicy)}
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
	return out
}

var _ runtime.Object = &Application{}
