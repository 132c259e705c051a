package render

import (
	"testing"
)

func TestTargetNamespaceAndReleaseNameDefaults(t *testing.T) {
	for _, c := range []struct{ order, product, ns, want string }{
		{"a", "b", "c", "a"}, {"", "b", "c", "b"}, {"", "", "c", "c"},
	} {
		if got := TargetNamespace(c.order, c.product, c.ns); got != c.want {
			t.Errorf("TargetNamespace(%q, %q, %q) = %q, want %q", c.order, c.product, c.ns, got, c.want)
		}
	}
	if ReleaseName("", "order") != "order" || ReleaseName("rel", "order") != "rel" {
		t.Error("release name: want the Product's, else the Order's name")
	}
}
