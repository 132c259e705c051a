package serving

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// pullSecret reads the repository Secret of the fixture's Serving.
func (f *fixture) pullSecret() (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: argocd.PullSecretName(f.ns, "podinfo-edge")}, s)
	return s, err
}

// pullSecretIs checks the repository Secret against the Argo CD fields it must hold.
func (f *fixture) pullSecretIs(repoURL, project string) error {
	s, err := f.pullSecret()
	if err != nil {
		return err
	}
	puller := registryCreds.NamespacePuller(f.ns)
	want := map[string]string{"type": "oci", "url": repoURL, "project": project, "username": puller.Username, "password": puller.Password, "insecureOCIForceHttp": "true"}
	for key, value := range want {
		if string(s.Data[key]) != value {
			return fmt.Errorf("%s=%q, want %q", key, s.Data[key], value)
		}
	}
	if len(s.Data) != len(want) || s.Labels[argocd.LabelSecretType] != argocd.SecretTypeRepository {
		return fmt.Errorf("labels %v, %d keys: want a repository Secret of exactly %v", s.Labels, len(s.Data), want)
	}
	return nil
}

// Argo CD gives a repository Secret with a project to that project's Applications alone (a
// credential template's project it does not match): each Serving's artifacts are read through
// one such Secret, of its exact repository, scoped to its Environment's AppProject, signed in as
// its namespace's puller. Someone who widens it (an empty project makes it every project's) has
// it put back, a deleted one is written again, it follows the Environment to another
// AppProject, and it goes with its Serving. (test/e2e's
// TestAnApplicationOfAnotherProjectCannotPullANamespacesArtifact shows Argo CD turning the other
// project away.)
func TestEachServingsArtifactsAreReadThroughASecretOfItsOwnProject(t *testing.T) {
	f := newFixture(t)
	f.cluster("p10", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	s := f.order("edge", prep.Name)
	repoURL := "oci://" + registry.Addr + "/" + f.ns + "/podinfo-edge"
	f.eventually("the Serving's repository Secret", func() error { return f.pullSecretIs(repoURL, f.project) })
	secret, err := f.pullSecret()
	must(t, err)
	if secret.Labels[argocd.LabelServingUID] != string(s.UID) {
		t.Errorf("the Secret is labelled for Serving UID %q, want %q", secret.Labels[argocd.LabelServingUID], s.UID)
	}
	var templates corev1.SecretList
	must(t, env.Client.List(f.ctx, &templates, client.InNamespace(cfg.ArgoCDNamespace), client.MatchingLabels{argocd.LabelSecretType: "repo-creds"}))
	if len(templates.Items) != 0 {
		t.Errorf("%d credential templates in Argo CD's namespace: Argo CD gives those to every project", len(templates.Items))
	}

	// Widened by someone: put back.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := f.pullSecret()
		if err != nil {
			return err
		}
		s.Data["project"] = nil
		return env.Client.Update(f.ctx, s)
	}))
	f.eventually("the widened Secret put back", func() error { return f.pullSecretIs(repoURL, f.project) })

	// Deleted by someone: written again.
	must(t, env.Client.Delete(f.ctx, &corev1.Secret{ObjectMeta: secret.ObjectMeta}))
	f.eventually("the deleted Secret written again", func() error { return f.pullSecretIs(repoURL, f.project) })

	// The Environment moves to another AppProject: the Secret follows.
	other := f.project + "-b"
	f.createProject(other, []any{f.ns}, []any{map[string]any{"server": "*", "namespace": "*"}})
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Project = other
		return env.Client.Update(f.ctx, &e)
	}))
	f.eventually("the Secret scoped to the new AppProject", func() error { return f.pullSecretIs(repoURL, other) })

	// It goes with its Serving.
	must(t, env.Client.Delete(f.ctx, s))
	f.eventually("the Secret gone with the Serving", func() error {
		if _, err := f.pullSecret(); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w)", err)
		}
		return nil
	})
}

// A repository Secret left by a Serving that is gone (a controller down when it went, a backup
// restored without its Servings) is deleted; a live Serving's is kept.
func TestARepositorySecretWhoseServingIsGoneIsDeleted(t *testing.T) {
	f := newFixture(t)
	f.cluster("p20", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	repoURL := "oci://" + registry.Addr + "/" + f.ns + "/podinfo-edge"
	f.eventually("the Serving's repository Secret", func() error { return f.pullSecretIs(repoURL, f.project) })

	gone := &v1.Serving{}
	gone.Namespace, gone.Name, gone.UID = f.ns, "gone-web", types.UID("6f1c2b8e-0d7a-4c55-9e0b-1a2b3c4d5e6f")
	left := argocd.PullSecret{ArgoCDNamespace: cfg.ArgoCDNamespace, Serving: gone, RepoURL: "oci://" + registry.Addr + "/kokumi/" + f.ns + "/gone-web",
		Project: f.project, Username: "pull-" + f.ns, Password: "x"}.Secret()
	must(t, env.Client.Create(f.ctx, left))
	f.eventually("the Secret of a Serving that is gone deleted", func() error {
		err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(left), &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w)", err)
		}
		return nil
	})
	if err := f.pullSecretIs(repoURL, f.project); err != nil {
		t.Errorf("the live Serving's Secret: %v", err)
	}
}
