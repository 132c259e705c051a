package fleet

import (
	"maps"
	"testing"
)

func TestServerOwners(t *testing.T) {
	cases := []struct {
		name     string
		clusters []Cluster
		want     map[string]string
	}{
		{"no Clusters own nothing", nil, map[string]string{}},
		{"a Cluster alone on its server owns it",
			[]Cluster{{Name: "edge-1", Server: "https://edge-1:6443"}, {Name: "edge-2", Server: "https://edge-2:6443"}},
			map[string]string{"edge-1": "edge-1", "edge-2": "edge-2"}},
		{"of two Clusters on one server the first by name owns it, the newer given first",
			[]Cluster{{Name: "a-typo", Server: "https://edge-1:6443"}, {Name: "edge-1", Server: "https://edge-1:6443"}},
			map[string]string{"a-typo": "a-typo", "edge-1": "a-typo"}},
		{"the order they are given in does not matter",
			[]Cluster{{Name: "edge-1", Server: "https://edge-1:6443"}, {Name: "a-typo", Server: "https://edge-1:6443"}},
			map[string]string{"a-typo": "a-typo", "edge-1": "a-typo"}},
		{"servers are compared as Argo CD compares them: a trailing slash, upper case, :443",
			[]Cluster{
				{Name: "c", Server: "https://edge.example.com"},
				{Name: "b", Server: "HTTPS://Edge.Example.com:443/"},
				{Name: "d", Server: "https://edge.example.com/"},
			},
			map[string]string{"b": "b", "c": "b", "d": "b"}},
		{"another port is another server",
			[]Cluster{{Name: "a", Server: "https://edge:6443"}, {Name: "b", Server: "https://edge:6444"}},
			map[string]string{"a": "a", "b": "b"}},
		{"three on one server all point at the first",
			[]Cluster{{Name: "z", Server: "https://s:6443"}, {Name: "m", Server: "https://s:6443/"}, {Name: "k", Server: "https://S:6443"}, {Name: "x", Server: "https://t:6443"}},
			map[string]string{"k": "k", "m": "k", "z": "k", "x": "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ServerOwners(tc.clusters); !maps.Equal(got, tc.want) {
				t.Errorf("ServerOwners = %v, want %v", got, tc.want)
			}
		})
	}
}
