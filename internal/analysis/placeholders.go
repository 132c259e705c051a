package analysis

import (
	"fmt"
	"regexp"
	"strings"
)

// The placeholders of a per-cluster check's url and body: plain string substitution, no
// template engine. ${cluster} and ${label:KEY} are a cluster's, and only a perCluster
// verification has them; the others are the release's.
const (
	PlaceholderCluster     = "cluster"
	PlaceholderLabel       = "label:"
	PlaceholderEnvironment = "environment"
	PlaceholderOrder       = "order"
	PlaceholderPreparation = "preparation"
	PlaceholderDigest      = "digest"
)

// Placeholders lists the placeholders, as they are written.
const Placeholders = "${cluster}, ${label:KEY}, ${environment}, ${order}, ${preparation}, ${digest}"

// placeholder matches one placeholder, or a ${ left open.
var placeholder = regexp.MustCompile(`\$\{[^}]*\}?`)

// labelKey is a label key as Kubernetes allows it: an optional DNS prefix and a name.
var labelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// Vars are the values the placeholders stand for.
type Vars struct {
	// Cluster and Labels are the cluster's name and labels.
	Cluster string
	Labels  map[string]string
	// Environment, Order, Preparation and Digest are the release's.
	Environment, Order, Preparation, Digest string
}

// CheckPlaceholders says what is wrong with the placeholders of s (a url or a body): one that
// is not known, left open, or a cluster's in a verification that is not perCluster; nil when
// there is nothing wrong.
func CheckPlaceholders(s string, perCluster bool) error {
	for _, p := range placeholder.FindAllString(s, -1) {
		if !strings.HasSuffix(p, "}") {
			return fmt.Errorf("%q is not closed: write one of %s", p, Placeholders)
		}
		name := p[2 : len(p)-1]
		switch {
		case name == PlaceholderEnvironment, name == PlaceholderOrder, name == PlaceholderPreparation, name == PlaceholderDigest:
		case name == PlaceholderCluster || strings.HasPrefix(name, PlaceholderLabel):
			if key := strings.TrimPrefix(name, PlaceholderLabel); name != PlaceholderCluster && !labelKey.MatchString(key) {
				return fmt.Errorf("%s does not name a label key", p)
			}
			if !perCluster {
				return fmt.Errorf("%s is a cluster's: set perCluster: true, or drop it", p)
			}
		default:
			return fmt.Errorf("%s is not a placeholder Kokumi knows: write one of %s", p, Placeholders)
		}
	}
	return nil
}

// Expand replaces the placeholders of s with their values, each passed through escape (nil:
// as they are). A placeholder CheckPlaceholders refuses is left as it is; a label the cluster
// does not have is empty.
func Expand(s string, v Vars, escape func(string) string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return placeholder.ReplaceAllStringFunc(s, func(p string) string {
		if !strings.HasSuffix(p, "}") {
			return p
		}
		name := p[2 : len(p)-1]
		var value string
		switch {
		case name == PlaceholderCluster:
			value = v.Cluster
		case strings.HasPrefix(name, PlaceholderLabel):
			value = v.Labels[strings.TrimPrefix(name, PlaceholderLabel)]
		case name == PlaceholderEnvironment:
			value = v.Environment
		case name == PlaceholderOrder:
			value = v.Order
		case name == PlaceholderPreparation:
			value = v.Preparation
		case name == PlaceholderDigest:
			value = v.Digest
		default:
			return p
		}
		if escape != nil {
			value = escape(value)
		}
		return value
	})
}
