package argocd

import "testing"

func TestNormalizeServerMakesOneNameOfWhatArgoCDSeesAsOneServer(t *testing.T) {
	same := []string{"https://edge-1.example.com:6443", "https://edge-1.example.com:6443/", "HTTPS://Edge-1.Example.com:6443//"}
	for _, s := range same {
		if got := NormalizeServer(s); got != "https://edge-1.example.com:6443" {
			t.Errorf("NormalizeServer(%q) = %q", s, got)
		}
	}
	if NormalizeServer("https://a.example.com:443/") != NormalizeServer("https://a.example.com") {
		t.Error("the default port makes another server")
	}
	if NormalizeServer("https://a.example.com:6443") == NormalizeServer("https://a.example.com:6444") {
		t.Error("another port is the same server")
	}
	if NormalizeServer("https://a.example.com/k8s/clusters/c-1") == NormalizeServer("https://a.example.com/k8s/clusters/c-2") {
		t.Error("another path (a proxy's cluster) is the same server")
	}
}
