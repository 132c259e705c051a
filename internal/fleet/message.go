package fleet

import (
	"regexp"
	"sync"
)

// What of Argo CD's messages a tenant reads: Argo CD writes the member server's address, the
// addresses it dialled and the TLS details of a failed connection into an Application's
// conditions and operation state, which Kokumi folds into the Serving's status.targets and the
// UI's rows, both readable by the Serving's namespace. Those are the admin's (on the Cluster, and
// in Argo CD); the tenant reads the rest of the message.
var (
	urlPattern     = regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>,;)}]+`)
	ipv6Pattern    = regexp.MustCompile(`\[[0-9a-fA-F:.]+\](:\d+)?`)
	ipv4Pattern    = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`)
	hostPortPatten = regexp.MustCompile(`\b[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)+:\d{2,5}\b`)
	tlsPattern     = regexp.MustCompile(`\b(x509|tls|remote error): [^;\n]*`)
)

// addressWithheld stands for an address a tenant does not read.
const addressWithheld = "<address>"

// TenantMessage is msg, a message of Argo CD's about one cluster, as a tenant reads it:
// addresses (URLs, IP addresses, host:port) become "<address>" and the details of a TLS error
// are left to the admin.
func TenantMessage(msg string) string {
	if msg == "" {
		return msg
	}
	// The same few messages come for every cluster of a fleet, on every reconcile: each is
	// rewritten once (five regular expressions, 35 µs), then remembered.
	tenantMessages.Lock()
	out, ok := tenantMessages.m[msg]
	tenantMessages.Unlock()
	if ok {
		return out
	}
	out = tenantMessage(msg)
	tenantMessages.Lock()
	if len(tenantMessages.m) >= tenantMessagesKept {
		clear(tenantMessages.m)
	}
	tenantMessages.m[msg] = out
	tenantMessages.Unlock()
	return out
}

// tenantMessagesKept bounds the messages TenantMessage remembers; past it, it starts over.
const tenantMessagesKept = 1024

// tenantMessages are the messages TenantMessage rewrote, by Argo CD's.
var tenantMessages = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// tenantMessage is TenantMessage, not remembered.
func tenantMessage(msg string) string {
	msg = tlsPattern.ReplaceAllString(msg, "$1: details withheld (an admin reads them on the Cluster and in Argo CD)")
	msg = urlPattern.ReplaceAllString(msg, addressWithheld)
	msg = ipv6Pattern.ReplaceAllString(msg, addressWithheld)
	msg = ipv4Pattern.ReplaceAllString(msg, addressWithheld)
	return hostPortPatten.ReplaceAllString(msg, addressWithheld)
}
