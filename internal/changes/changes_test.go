package changes

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestImagesAreMatchedByRepository(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/podinfo:6.1.0":               "ghcr.io/podinfo",
		"registry:5000/team/web@sha256:abc":   "registry:5000/team/web",
		"registry:5000/team/web:1@sha256:abc": "registry:5000/team/web",
		"registry:5000/team/web":              "registry:5000/team/web",
	} {
		if got := Repository(ref); got != want {
			t.Errorf("Repository(%q) = %q, want %q", ref, got, want)
		}
	}
	a := []v1.ImagePin{{Original: "web:1", Pinned: "web@sha256:1"}, {Original: "db:1", Pinned: "db@sha256:d"}, {Original: "same:1", Pinned: "same@sha256:s"}}
	b := []v1.ImagePin{{Original: "web:2", Pinned: "web@sha256:2"}, {Original: "cache:1", Pinned: "cache@sha256:c"}, {Original: "same:1", Pinned: "same@sha256:s"}}
	got, unchanged := Images(a, b)
	var s []string
	for _, c := range got {
		s = append(s, fmt.Sprintf("%s %s %s→%s", c.Change, c.Repository, PinnedDigest(c.From.Pinned), PinnedDigest(c.To.Pinned)))
	}
	if fmt.Sprint(s) != "[added cache →sha256:c removed db sha256:d→ changed web sha256:1→sha256:2]" || unchanged != 1 {
		t.Errorf("%v, %d unchanged", s, unchanged)
	}
}

func TestDiffObjectsMatchesByKeyAndKeepsTheManifestsOrder(t *testing.T) {
	a, err := Objects("a", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z}\ndata: {k: '1'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: gone}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Objects("b", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z}\ndata: {k: '2'}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: new}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a[0].Name != "z" || a[1].Key() != "v1/ConfigMap/gone" {
		t.Fatalf("objects of a: %+v", a)
	}
	got, unchanged, err := DiffObjects("a", "b", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || unchanged != 0 || got[0].Change != Removed || got[0].Name != "gone" || got[1].Change != Changed || got[2].Change != Added || got[2].Kind != "Namespace" {
		t.Fatalf("changes %+v", got)
	}
	if !strings.HasPrefix(got[1].Diff, "--- a/v1/ConfigMap/z\n+++ b/v1/ConfigMap/z\n") || !strings.Contains(got[1].Diff, "-  k: \"1\"\n+  k: \"2\"\n") {
		t.Errorf("diff:\n%s", got[1].Diff)
	}
}

func TestValuesComparesTheDigestOfTheValues(t *testing.T) {
	prep := func(d string) *v1.Preparation {
		return &v1.Preparation{Spec: v1.PreparationSpec{ConfigurationDigest: d}}
	}
	for _, c := range []struct {
		a, b string
		want Change
	}{
		{"sha256:1", "sha256:2", Changed},
		{"sha256:1", "sha256:1", ""},
		{"", "sha256:1", Unknown},
		{"sha256:1", "", Unknown},
		{"", "", Unknown},
	} {
		if got := Values(prep(c.a), prep(c.b)); got != c.want {
			t.Errorf("Values(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
