package argocd

import "testing"

func TestPermitsSourceNamespace(t *testing.T) {
	cases := []struct {
		name     string
		patterns []string
		ns       string
		want     bool
	}{
		{"an exact name admits its namespace", []string{"platform"}, "platform", true},
		{"an exact name admits no other", []string{"platform"}, "platform-2", false},
		{"a glob admits what it matches", []string{"team-*"}, "team-a", true},
		{"a star admits every namespace", []string{"*"}, "anything", true},
		{"a regular expression in slashes", []string{"/^team-[0-9]+$/"}, "team-42", true},
		{"a regular expression that does not match", []string{"/^team-[0-9]+$/"}, "team-x", false},
		{"no patterns admit nothing", nil, "platform", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Project{Spec: ProjectSpec{SourceNamespaces: tc.patterns}}
			if got := p.PermitsSourceNamespace(tc.ns); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPermitsDestination(t *testing.T) {
	cases := []struct {
		name  string
		dests []Destination
		want  bool
	}{
		{"any server, any namespace", []Destination{{Server: "*", Namespace: "*"}}, true},
		{"the server and namespace by glob", []Destination{{Server: "https://edge-*", Namespace: "pod*"}}, true},
		{"the cluster by name", []Destination{{Name: "edge-1", Namespace: "podinfo"}}, true},
		{"another namespace only", []Destination{{Server: "*", Namespace: "team-a"}}, false},
		{"a denied namespace", []Destination{{Server: "*", Namespace: "*"}, {Server: "*", Namespace: "!podinfo"}}, false},
		{"a denied server", []Destination{{Server: "*", Namespace: "*"}, {Server: "!https://edge-1:6443", Namespace: "*"}}, false},
		{"no destinations", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Project{Spec: ProjectSpec{Destinations: tc.dests}}
			if got := p.PermitsDestination("https://edge-1:6443", "edge-1", "podinfo"); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
