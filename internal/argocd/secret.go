package argocd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SyncSecret makes have, a Secret Kokumi keeps for Argo CD, match want in labels and
// annotations (want's are added or overwritten; others are kept) and in data (replaced), and
// reports whether anything changed: the caller writes only then.
func SyncSecret(have, want *corev1.Secret) bool {
	changed := false
	for _, m := range []struct{ have, want *map[string]string }{
		{&have.Labels, &want.Labels}, {&have.Annotations, &want.Annotations},
	} {
		if *m.have == nil && len(*m.want) > 0 {
			*m.have = map[string]string{}
		}
		for k, v := range *m.want {
			if (*m.have)[k] != v {
				(*m.have)[k] = v
				changed = true
			}
		}
	}
	if !maps.EqualFunc(have.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
		have.Data = want.Data
		changed = true
	}
	if len(have.StringData) > 0 {
		have.StringData = nil
		changed = true
	}
	return changed
}

// pullSecretPrefix starts the name of every Serving's repository Secret.
const pullSecretPrefix = "kokumi-pull-"

// PullSecretName is the name, in Argo CD's namespace, of the repository Secret of the Serving
// namespace/name: stable, unique, short.
func PullSecretName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return pullSecretPrefix + hex.EncodeToString(sum[:])[:20]
}

// PullSecret is what Argo CD signs in to one Serving's repository with.
type PullSecret struct {
	// ArgoCDNamespace is where the Secret lives.
	ArgoCDNamespace string
	// Serving is the Serving the Secret is for: its namespace, name and UID.
	Serving metav1.Object
	// RepoURL is the repository, exactly: oci://<registry>/kokumi/<namespace>/<order>.
	RepoURL string
	// Project is the AppProject of the Serving's Applications: Argo CD gives the credentials
	// to Applications of this project alone.
	Project string
	// Username and Password sign in to the registry.
	Username, Password string
	// PlainHTTP makes Argo CD speak plain HTTP to the registry.
	PlainHTTP bool
}

// Secret is the Argo CD repository Secret of p: a repository (not a credential template, whose
// project Argo CD does not match) of the exact URL, scoped to the project, labelled and
// annotated for its Serving as its Applications are (IsKokumis, BelongsTo, Orphaned).
func (p PullSecret) Secret() *corev1.Secret {
	data := map[string][]byte{
		"type":     []byte("oci"),
		"url":      []byte(p.RepoURL),
		"project":  []byte(p.Project),
		"username": []byte(p.Username),
		"password": []byte(p.Password),
	}
	if p.PlainHTTP {
		data["insecureOCIForceHttp"] = []byte("true")
	}
	ns, name := p.Serving.GetNamespace(), p.Serving.GetName()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: PullSecretName(ns, name), Namespace: p.ArgoCDNamespace,
			Labels: map[string]string{
				LabelSecretType: SecretTypeRepository, LabelManagedBy: ManagedByKokumi,
				LabelServing: name, LabelServingNamespace: ns, LabelServingUID: string(p.Serving.GetUID()),
			},
			Annotations: map[string]string{AnnotationOwner: Owner(ns, name)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// PullSecretLabels select every repository Secret Kokumi keeps for its Servings.
func PullSecretLabels() map[string]string {
	return map[string]string{LabelSecretType: SecretTypeRepository, LabelManagedBy: ManagedByKokumi}
}

// ServingOf names the Serving a Secret or Application Kokumi labelled was written for; ok is
// false when it names none.
func ServingOf(o metav1.Object) (key types.NamespacedName, ok bool) {
	l := o.GetLabels()
	key = types.NamespacedName{Namespace: l[LabelServingNamespace], Name: l[LabelServing]}
	return key, l[LabelManagedBy] == ManagedByKokumi && key.Name != "" && key.Namespace != ""
}

// Written says what KeepSecret did.
type Written int

// What KeepSecret did.
const (
	// Unchanged: the Secret was as wanted; nothing was written.
	Unchanged Written = iota
	// Created: the Secret was made.
	Created
	// Updated: the Secret was brought in line (SyncSecret).
	Updated
)

// KeepSecret creates want, or updates the Secret of its name to it (SyncSecret), writing only
// when something differs: it reads through cached first, and through live when the create finds
// one the cache has not seen yet (or one without the labels the cache selects by). what names
// the Secret in errors ("Argo CD cluster Secret").
func KeepSecret(ctx context.Context, w client.Writer, cached, live client.Reader, want *corev1.Secret, what string) (Written, error) {
	key := client.ObjectKeyFromObject(want)
	var have corev1.Secret
	err := cached.Get(ctx, key, &have)
	if apierrors.IsNotFound(err) {
		if err = w.Create(ctx, want); err == nil {
			return Created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return Unchanged, fmt.Errorf("create %s %s: %w", what, key, err)
		}
		err = live.Get(ctx, key, &have)
	}
	if err != nil {
		return Unchanged, fmt.Errorf("read %s %s: %w", what, key, err)
	}
	if !SyncSecret(&have, want) {
		return Unchanged, nil
	}
	if err := w.Update(ctx, &have); err != nil {
		return Unchanged, fmt.Errorf("update %s %s: %w", what, key, err)
	}
	return Updated, nil
}
