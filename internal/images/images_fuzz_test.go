package images

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// digestOf is a well-formed digest derived from s, standing in for what a registry answers.
func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pinAsResolved maps an image as Resolve pins it: a reference by digest stays as written, a
// tag points at its digest; a reference that does not parse is not pinned (Resolve fails it).
func pinAsResolved(ref string) (string, bool) {
	parsed, err := parseImage(ref)
	if err != nil {
		return "", false
	}
	if _, ok := parsed.(name.Digest); ok {
		return ref, true
	}
	return pinnedRef(ref, digestOf(ref)), true
}

// A pinned reference parses as a reference by digest, names the repository the original
// named, carries the digest, and pinning it again changes nothing.
func FuzzPinnedRef(f *testing.F) {
	for _, seed := range []string{
		"nginx", "nginx:1.25", "library/nginx:latest", "ghcr.io/stefanprodan/podinfo:6.14.1",
		"127.0.0.1:5000/a/b:v1", "127.0.0.1:5000/a/b", "registry.local:443/team/app:1.0",
		"ghcr.io/x/y:1@sha256:" + strings.Repeat("a", 64), "localhost:5000", "localhost/app",
		"[::1]:5000/app:1", "docker.io/library/busybox:1.37", "quay.io/a/b/c/d:e_f.g-h",
	} {
		f.Add(seed, []byte("registry answer"))
	}
	f.Fuzz(func(t *testing.T, ref string, answer []byte) {
		original, err := name.ParseReference(ref)
		if err != nil {
			return // not an image reference: Resolve reports it, nothing is pinned
		}
		digest := digestOf(string(answer))
		pinned := pinnedRef(ref, digest)
		parsed, err := name.NewDigest(pinned)
		if err != nil {
			t.Fatalf("pinnedRef(%q) = %q does not parse as a reference by digest: %v", ref, pinned, err)
		}
		if got, want := parsed.Context().Name(), original.Context().Name(); got != want {
			t.Fatalf("pinnedRef(%q) = %q names repository %s, want %s", ref, pinned, got, want)
		}
		if parsed.DigestStr() != digest {
			t.Fatalf("pinnedRef(%q) = %q carries digest %s, want %s", ref, pinned, parsed.DigestStr(), digest)
		}
		if again := pinnedRef(pinned, digest); again != pinned {
			t.Fatalf("pinning %q again gives %q", pinned, again)
		}
	})
}

// namespaceName is what Kubernetes accepts as a namespace name.
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// repositoryPath is a repository name as the OCI distribution spec has it.
var repositoryPath = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// Every image of a well-formed repository has a repository to be vendored into, well-formed
// too, under the namespace's own directory of the vendor registry.
func FuzzVendorRepository(f *testing.F) {
	for _, seed := range []string{
		"nginx:1.25", "ghcr.io/stefanprodan/podinfo:6.14.1", "127.0.0.1:5000/a/b:v1",
		"registry.local:443/team/app", "[::1]:5000/app:1", "localhost:5000/x", "Registry.Example.COM/app:1", "!./0",
	} {
		f.Add(seed, "team-a")
	}
	f.Fuzz(func(t *testing.T, ref, namespace string) {
		src, err := name.ParseReference(ref)
		if err != nil || len(namespace) > 63 || !namespaceName.MatchString(namespace) || !repositoryPath.MatchString(src.Context().RepositoryStr()) {
			return // the source's registry refuses such a repository before anything is vendored
		}
		for _, registry := range []string{"127.0.0.1:5000", "kokumi-registry.kokumi-system.svc:5000"} {
			dst := vendorRepository(registry, namespace, src.Context())
			if !strings.HasPrefix(dst, registry+"/"+VendorDir+"/"+namespace+"/") {
				t.Fatalf("image %q of namespace %s is vendored to %q, outside its directory", ref, namespace, dst)
			}
			repo, err := name.NewRepository(dst)
			if err != nil {
				t.Fatalf("image %q cannot be vendored: repository %q does not parse: %v", ref, dst, err)
			}
			if !repositoryPath.MatchString(repo.RepositoryStr()) {
				t.Fatalf("image %q is vendored to %q, which registries refuse: not a repository name of the OCI distribution spec", ref, dst)
			}
			if repo.RegistryStr() != registry {
				t.Fatalf("image %q is vendored to registry %s, want %s", ref, repo.RegistryStr(), registry)
			}
		}
	})
}

// workload is a Deployment whose init containers and containers run images, beside a
// ConfigMap and an object of an unknown kind that mention the same strings.
func workload(imgs []string) []*unstructured.Unstructured {
	containers := func(prefix string) []any {
		out := make([]any, len(imgs))
		for i, img := range imgs {
			out[i] = map[string]any{"name": prefix + string(rune('a'+i)), "image": img, "args": []any{img}}
		}
		return out
	}
	data := map[string]any{}
	for i, img := range imgs {
		data["image"+string(rune('a'+i))] = img
	}
	return []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"initContainers": containers("init-"), "containers": containers("c-"),
			}}}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "images"}, "data": data}},
		{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": containers("w-")}}}}},
	}
}

// Find sees every image of the workload and nothing else; Rewrite replaces exactly the
// container images it is given, into references that parse by digest and keep their
// repository, leaves every other string alone, and rewriting twice changes nothing more.
func FuzzFindAndRewrite(f *testing.F) {
	f.Add("nginx:1.25\nghcr.io/stefanprodan/podinfo:6.14.1\n\nnot an image\n127.0.0.1:5000/a/b@sha256:" + strings.Repeat("b", 64))
	f.Add("busybox\nbusybox\nbusybox:latest")
	f.Add("UPPER/case:1\n:tag\n@sha256:1")
	f.Fuzz(func(t *testing.T, list string) {
		imgs := strings.Split(list, "\n")
		if len(imgs) > 16 {
			imgs = imgs[:16]
		}
		objs := workload(imgs)
		want := map[string]bool{}
		for _, img := range imgs {
			if img != "" {
				want[img] = true
			}
		}
		found := Find(objs)
		if !sort.StringsAreSorted(found) || len(found) != len(want) {
			t.Fatalf("Find = %q, want the %d distinct images %q, sorted", found, len(want), imgs)
		}
		for _, img := range found {
			if !want[img] {
				t.Fatalf("Find = %q holds %q, which no container runs", found, img)
			}
		}

		mapping := map[string]string{}
		for _, img := range found {
			if pinned, ok := pinAsResolved(img); ok {
				mapping[img] = pinned
			}
		}
		before := workload(imgs)
		Rewrite(objs, mapping)
		for i := 1; i < len(objs); i++ {
			if !reflect.DeepEqual(objs[i].Object, before[i].Object) {
				t.Fatalf("Rewrite changed a %s that runs no container:\n%v\nwas\n%v", objs[i].GetKind(), objs[i].Object, before[i].Object)
			}
		}
		for _, list := range []string{"initContainers", "containers"} {
			got, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", list)
			for i, c := range got {
				c := c.(map[string]any)
				original := imgs[i]
				wantImage := original
				if pinned, ok := mapping[original]; ok {
					wantImage = pinned
				}
				if c["image"] != wantImage {
					t.Fatalf("%s[%d] runs %q after Rewrite, want %q", list, i, c["image"], wantImage)
				}
				if args := c["args"].([]any); len(args) != 1 || args[0] != original {
					t.Fatalf("%s[%d]'s args became %v: only the image is rewritten", list, i, args)
				}
				if _, ok := mapping[original]; !ok {
					continue
				}
				parsed, err := name.NewDigest(wantImage)
				if err != nil {
					t.Fatalf("%q was rewritten to %q, which does not parse by digest: %v", original, wantImage, err)
				}
				if ref, _ := name.ParseReference(original); parsed.Context().Name() != ref.Context().Name() {
					t.Fatalf("%q was rewritten to %q, another repository", original, wantImage)
				}
			}
		}
		once := make([]map[string]any, len(objs))
		for i := range objs {
			once[i] = objs[i].DeepCopy().Object
		}
		Rewrite(objs, mapping)
		for i := range objs {
			if !reflect.DeepEqual(objs[i].Object, once[i]) {
				t.Fatalf("rewriting twice is not rewriting once:\n%v\nwas\n%v", objs[i].Object, once[i])
			}
		}
	})
}
