package argocd

import (
	"regexp"
	"strings"
	"sync"

	"github.com/gobwas/glob"
)

// Destination is one entry of an AppProject's spec.destinations.
type Destination struct {
	Server    string `json:"server,omitempty"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// ProjectSpec is the part of an AppProject's spec Kokumi checks.
type ProjectSpec struct {
	SourceNamespaces []string      `json:"sourceNamespaces,omitempty"`
	Destinations     []Destination `json:"destinations,omitempty"`
}

// Project is an Argo CD AppProject, as much as Kokumi reads of it.
type Project struct {
	Name string
	Spec ProjectSpec
}

// PermitsSourceNamespace reports whether the project admits Applications of namespace, as
// Argo CD reads spec.sourceNamespaces: a pattern wrapped in slashes is a regular expression,
// anything else a glob.
func (p Project) PermitsSourceNamespace(namespace string) bool {
	for _, pattern := range p.Spec.SourceNamespaces {
		if len(pattern) > 2 && strings.HasPrefix(pattern, "/") && strings.HasSuffix(pattern, "/") {
			if re, err := regexp.Compile(pattern[1 : len(pattern)-1]); err == nil && re.MatchString(namespace) {
				return true
			}
			continue
		}
		if globMatch(pattern, namespace, false) {
			return true
		}
	}
	return false
}

// PermitsDestination reports whether the project permits deploying to the cluster named name
// at server, into namespace, with Argo CD's rules: globs, and "!" patterns that deny.
func (p Project) PermitsDestination(server, name, namespace string) bool {
	anyMatched := false
	for _, item := range p.Spec.Destinations {
		nameMatched := name != "" && globMatch(item.Name, name, true)
		serverMatched := server != "" && globMatch(item.Server, server, true)
		namespaceMatched := globMatch(item.Namespace, namespace, true)
		switch {
		case (serverMatched || nameMatched) && namespaceMatched:
			anyMatched = true
		case ((!nameMatched && isDeny(item.Name)) || (!serverMatched && isDeny(item.Server))) && namespaceMatched:
			return false
		case !namespaceMatched && isDeny(item.Namespace) && serverMatched:
			return false
		}
	}
	return anyMatched
}

// DestinationRefusal is the message Argo CD gives for a destination its project refuses.
func DestinationRefusal(server, namespace, project string) string {
	return "application destination server '" + server + "' and namespace '" + namespace +
		"' do not match any of the allowed destinations in project '" + project + "'"
}

func isDeny(pattern string) bool { return strings.HasPrefix(pattern, "!") }

var globs sync.Map // pattern → *glob.Pattern, or nil when it does not compile

func globMatch(pattern, value string, allowNegation bool) bool {
	if allowNegation && isDeny(pattern) {
		return !globMatch(pattern[1:], value, false)
	}
	if pattern == "*" {
		return true
	}
	compiled, ok := globs.Load(pattern)
	if !ok {
		g, err := glob.Compile(pattern)
		if err != nil {
			g = nil
		}
		compiled, _ = globs.LoadOrStore(pattern, g)
	}
	g, _ := compiled.(*glob.Pattern)
	return g != nil && g.Match(value)
}
