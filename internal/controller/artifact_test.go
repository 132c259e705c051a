package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestArtifactLocationReadsKokumisOwnRepositoryFromTheCurrentBundledRegistry(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	prep := func(ref string) *v1.Preparation {
		return &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "web-0123456789", Namespace: "team"},
			Spec: v1.PreparationSpec{OrderRef: v1.LocalObjectReference{Name: "web"}, Artifact: v1.Artifact{Ref: ref, Digest: d}}}
	}
	for _, c := range []struct {
		name, bundled, ref, want string
	}{
		{"made here", "registry.new:5000", "oci://registry.new:5000/kokumi/team/web@" + d, "registry.new:5000/kokumi/team/web"},
		{"the registry moved", "registry.new:5000", "oci://registry.old:5000/kokumi/team/web@" + d, "registry.new:5000/kokumi/team/web"},
		{"another Order's repository", "registry.new:5000", "oci://registry.old:5000/kokumi/team/api@" + d, "registry.old:5000/kokumi/team/api"},
		{"another namespace's repository", "registry.new:5000", "oci://registry.old:5000/kokumi/other/web@" + d, "registry.old:5000/kokumi/other/web"},
		{"a repository that is not Kokumi's", "registry.new:5000", "oci://ghcr.io/team/web@" + d, "ghcr.io/team/web"},
		{"no bundled registry", "", "oci://registry.old:5000/kokumi/team/web@" + d, "registry.old:5000/kokumi/team/web"},
		{"a ref without its digest", "registry.new:5000", "oci://registry.old:5000/kokumi/team/web", "registry.new:5000/kokumi/team/web"},
	} {
		t.Run(c.name, func(t *testing.T) {
			repository, digest := ArtifactLocation(c.bundled, prep(c.ref))
			if repository != c.want || digest != d {
				t.Errorf("ArtifactLocation(%q, %s) = %s@%s, want %s@%s", c.bundled, c.ref, repository, digest, c.want, d)
			}
		})
	}
}

func TestFailedRendersWaitTwiceAsLongEachTimeUntilTheInputChanges(t *testing.T) {
	first, most := 5*time.Second, 10*time.Minute
	for failures, want := range map[int]time.Duration{
		1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 320 * time.Second, 8: 10 * time.Minute, 60: 10 * time.Minute,
	} {
		if got := backoff(failures, first, most); got != want {
			t.Errorf("after %d failures: wait %s, want %s", failures, got, want)
		}
	}

	var r retries
	order := types.NamespacedName{Namespace: "team", Name: "web"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
		if n, wait := r.failed(order, "1/uid/1", now, first, most); n != i+1 || wait != want {
			t.Fatalf("failure %d: %d in a row, wait %s; want %d, %s", i+1, n, wait, i+1, want)
		}
		if got := r.wait(order, "1/uid/1", now.Add(time.Second)); got != want-time.Second {
			t.Errorf("a second later the same input waits %s, want %s", got, want-time.Second)
		}
		now = now.Add(want)
		if got := r.wait(order, "1/uid/1", now); got != 0 {
			t.Errorf("once the wait is over the input still waits %s", got)
		}
	}
	// A changed Order or Product is tried at once, and starts again from the first wait.
	if got := r.wait(order, "2/uid/1", now.Add(-time.Second)); got != 0 {
		t.Errorf("a changed input waits %s", got)
	}
	if n, wait := r.failed(order, "2/uid/1", now, first, most); n != 1 || wait != first {
		t.Errorf("a changed input's first failure: %d in a row, wait %s", n, wait)
	}
	r.forget(order)
	if got := r.wait(order, "2/uid/1", now); got != 0 {
		t.Errorf("a forgotten Order waits %s", got)
	}
}
