package preparation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
