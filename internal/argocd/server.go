package argocd

import (
	"net/url"
	"strings"
)

// NormalizeServer is the form of an API server URL under which Argo CD finds a cluster: Argo CD
// trims a trailing "/"; scheme and host are case-insensitive and ":443" is https's default, so
// those spellings reach the same server too. Two Clusters whose servers normalize alike are one
// server to Argo CD, which keeps a single cluster Secret (one identity) for it.
func NormalizeServer(server string) string {
	s := strings.TrimRight(strings.TrimSpace(server), "/")
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return strings.ToLower(s)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	if u.Scheme == "https" && u.Port() == "443" {
		u.Host = u.Hostname()
		if strings.Contains(u.Host, ":") {
			u.Host = "[" + u.Host + "]"
		}
	}
	return strings.TrimRight(u.String(), "/")
}
