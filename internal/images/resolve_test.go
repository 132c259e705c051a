package images_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// A namespace's images are vendored under vendor/<namespace>/, by digest only: no tag names
// them, so that one namespace's copies are not another's by name.
func TestVendorForANamespaceCopiesByDigestUnderItsOwnPath(t *testing.T) {
	ctx := context.Background()
	src := ocitest.Start(t)
	dst := ocitest.Start(t)
	ref := ocitest.Repo(src, "team/app:1.0")
	digest := ocitest.PushImage(t, ref, 2)
	r := &images.Resolver{Namespace: "team-a"}
	pins, err := r.Resolve(ctx, []string{ref}, dst.Addr)
	if err != nil {
		t.Fatal(err)
	}
	want := dst.Addr + "/vendor/team-a/" + strings.ReplaceAll(src.Addr, ":", "-") + "/team/app@" + digest
	if len(pins) != 1 || pins[0].Pinned != want {
		t.Fatalf("pins %+v, want %s", pins, want)
	}
	if !ocitest.Exists(t, want) {
		t.Errorf("%s was not copied", want)
	}
	if tagged := strings.Replace(want, "@"+digest, ":1.0", 1); ocitest.Exists(t, tagged) {
		t.Errorf("the copy is also tagged %s", tagged)
	}
}

func TestAllowRefusesAnImageItsRepositoryIsNotAllowed(t *testing.T) {
	ctx := context.Background()
	src := ocitest.Start(t)
	ref := ocitest.Repo(src, "vendor/team-b/app:1.0")
	digest := ocitest.PushImage(t, ref, 1)
	refused := errors.New("not yours")
	var asked []string
	r := &images.Resolver{Allow: func(repository string) error {
		asked = append(asked, repository)
		if strings.Contains(repository, "/vendor/team-b/") {
			return refused
		}
		return nil
	}}
	for _, image := range []string{ref, ocitest.Repo(src, "vendor/team-b/app@"+digest)} {
		_, err := r.Resolve(ctx, []string{image}, "")
		var ie *images.Error
		if !errors.As(err, &ie) || ie.Image != image || !errors.Is(err, refused) {
			t.Errorf("pinning %s: %v, want it refused", image, err)
		}
	}
	if _, err := r.Resolve(ctx, []string{ref}, ocitest.Start(t).Addr); !errors.Is(err, refused) {
		t.Errorf("vendoring %s: %v, want it refused", ref, err)
	}
	if len(asked) != 3 || asked[0] != src.Addr+"/vendor/team-b/app" {
		t.Errorf("Allow was asked about %v", asked)
	}
}
