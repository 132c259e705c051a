package fleet

import (
	"strings"
	"testing"
)

func TestTenantMessageWithholdsAddressesAndTLSDetails(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`Failed to load live state: Get "https://10.20.30.40:6443/version?timeout=32s": dial tcp 10.20.30.40:6443: connect: connection refused`,
			`Failed to load live state: Get "<address>": dial tcp <address>: connect: connection refused`},
		{`application destination {https://edge-1.internal.example:6443 podinfo} is not permitted in project 'edge'`,
			`application destination {<address> podinfo} is not permitted in project 'edge'`},
		{`Get "https://[fd00::1]:6443/api": x509: certificate signed by unknown authority (possibly because of "crypto/rsa: verification error"); retrying`,
			`Get "<address>": x509: details withheld (an admin reads them on the Cluster and in Argo CD); retrying`},
		{`dial tcp edge-2.corp.example:443: i/o timeout`, `dial tcp <address>: i/o timeout`},
		{`Deployment "web" exceeded its progress deadline`, `Deployment "web" exceeded its progress deadline`},
		{`one or more objects failed to apply, reason: namespaces "podinfo" is forbidden`, `one or more objects failed to apply, reason: namespaces "podinfo" is forbidden`},
		{`sync failed at sha256:0123456789ab`, `sync failed at sha256:0123456789ab`},
	} {
		if got := TenantMessage(tc.in); got != tc.want {
			t.Errorf("TenantMessage(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if got := TenantMessage("10.0.0.1"); strings.Contains(got, "10.0.0.1") {
		t.Errorf("a bare address passes: %q", got)
	}
}
