package registry_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// TestThePusherAloneListsRepositoriesAndManifests: the collector of Kokumi's controller finds
// what nothing names by listing the repositories (the catalog) and each one's manifests, with
// when each was pushed; the puller, and anyone else, lists neither.
func TestThePusherAloneListsRepositoriesAndManifests(t *testing.T) {
	ctx := context.Background()
	reg, creds := gcRegistry(t, t.TempDir(), 0, 0)
	before := time.Now().Add(-time.Second)
	first, _ := artifact(t, reg, creds.Pusher, "kokumi/team/web", "one")
	second, _ := artifact(t, reg, creds.Pusher, "kokumi/team/web", "two")
	artifact(t, reg, creds.Pusher, "vendor/team/docker.io/library/nginx", "three")

	pusher := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}
	repos, more, err := pusher.Catalog(ctx, reg.Addr, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(repos, []string{"kokumi/team/web"}) || !more {
		t.Fatalf("the first page of one is %v (more: %v), want kokumi/team/web and more", repos, more)
	}
	if repos, more, err = pusher.Catalog(ctx, reg.Addr, 10, repos[0]); err != nil || !slices.Equal(repos, []string{"vendor/team/docker.io/library/nginx"}) || more {
		t.Fatalf("the page after kokumi/team/web is %v (more: %v, %v), want the vendored repository alone", repos, more, err)
	}

	list, err := pusher.Manifests(ctx, ocitest.Repo(reg, "kokumi/team/web"), oci.MaxManifestsPage, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{first, second}
	slices.Sort(want)
	var got []string
	for _, m := range list.Manifests {
		got = append(got, m.Digest)
		if m.Pushed.Before(before) || m.Pushed.After(time.Now()) {
			t.Errorf("%s was pushed at %s, not during the test", m.Digest, m.Pushed)
		}
		if m.Pushed.After(list.Newest) {
			t.Errorf("%s was pushed at %s, after the newest %s", m.Digest, m.Pushed, list.Newest)
		}
	}
	if !slices.Equal(got, want) || list.More {
		t.Fatalf("the manifests of kokumi/team/web are %v (more: %v), want %v", got, list.More, want)
	}
	page, err := pusher.Manifests(ctx, ocitest.Repo(reg, "kokumi/team/web"), 1, want[0])
	if err != nil || len(page.Manifests) != 1 || page.Manifests[0].Digest != want[1] || page.More {
		t.Fatalf("the page after %s is %+v (%v), want %s alone", want[0], page, err, want[1])
	}
	if none, err := pusher.Manifests(ctx, ocitest.Repo(reg, "kokumi/team/gone"), 10, ""); err != nil || len(none.Manifests) != 0 || none.Newest.Before(before) {
		t.Fatalf("a repository that does not exist lists %+v (%v), want no manifest and the registry's start as its last push", none, err)
	}

	for _, who := range []struct {
		name string
		cred oci.Credential
	}{{"the puller", creds.Puller}, {"nobody", oci.Credential{}}} {
		for _, path := range []string{"/v2/_catalog", "/v2/kokumi/team/web" + oci.ManifestsSuffix} {
			resp := raw(t, http.MethodGet, "http://"+reg.Addr+path, who.cred)
			if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s reads %s: %d, want 403 or 401", who.name, path, resp.StatusCode)
			}
		}
	}
}

// TestAConditionalDeletionNeverDeletesFromARepositoryPushedToSince: the collector deletes a
// manifest only if its repository was not pushed to after the time it decided on. A push of the
// same manifest again counts, and so does a push that finds it there (the pusher's HEAD, as a
// render that vendors an image already there does) and the push of another manifest to the
// repository (an index naming the manifest). HTTP dates count seconds: the test waits a second
// between a decision and the push it must see.
func TestAConditionalDeletionNeverDeletesFromARepositoryPushedToSince(t *testing.T) {
	ctx := context.Background()
	reg, creds := gcRegistry(t, t.TempDir(), 0, 0)
	pusher := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}
	const nginx, redis = "vendor/team/docker.io/library/nginx", "vendor/team/docker.io/library/redis"
	old, _ := artifact(t, reg, creds.Pusher, nginx, "old")
	cached, _ := artifact(t, reg, creds.Pusher, redis, "cached")
	time.Sleep(1100 * time.Millisecond)
	decided := time.Now()
	time.Sleep(1100 * time.Millisecond)

	// Pushed again since the decision: kept.
	artifact(t, reg, creds.Pusher, nginx, "old")
	if err := pusher.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, nginx), old, decided); !errors.Is(err, oci.ErrModified) {
		t.Fatalf("deleting %s, pushed again since, answered %v, want oci.ErrModified", old, err)
	}
	if _, err := pusher.Pull(ctx, ocitest.Repo(reg, nginx), old); err != nil {
		t.Fatalf("%s, pushed again since the decision, is gone: %v", old, err)
	}
	// Found there by a push since (its HEAD): kept.
	repo, err := pusher.Repository(ocitest.Repo(reg, redis))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Resolve(ctx, cached); err != nil { // a HEAD
		t.Fatalf("HEAD %s: %v", cached, err)
	}
	if err := pusher.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, redis), cached, decided); !errors.Is(err, oci.ErrModified) {
		t.Fatalf("deleting %s, which a push found there since, answered %v, want oci.ErrModified", cached, err)
	}
	// Another manifest pushed to the repository since: kept too.
	artifact(t, reg, creds.Pusher, redis, "newer")
	if err := pusher.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, redis), cached, decided); !errors.Is(err, oci.ErrModified) {
		t.Fatalf("deleting %s from a repository pushed to since answered %v, want oci.ErrModified", cached, err)
	}

	// Nothing pushed since: deleted, and deleting it again is no error.
	time.Sleep(1100 * time.Millisecond)
	now := time.Now()
	if err := pusher.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, nginx), old, now); err != nil {
		t.Fatalf("delete %s: %v", old, err)
	}
	if _, err := pusher.Pull(ctx, ocitest.Repo(reg, nginx), old); !oci.IsNotFound(err) {
		t.Fatalf("%s is still there after its deletion: %v", old, err)
	}
	if err := pusher.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, nginx), old, now); err != nil {
		t.Fatalf("delete %s again: %v", old, err)
	}

	// The puller deletes nothing, conditionally or not.
	puller := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Puller}}
	if err := puller.DeleteManifestUnmodifiedSince(ctx, ocitest.Repo(reg, redis), cached, now); err == nil {
		t.Fatal("the puller deleted a manifest")
	}
}
