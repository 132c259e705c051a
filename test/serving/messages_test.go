package serving

import (
	"fmt"
	"strings"
	"testing"
)

// Argo CD writes the member server's address and the TLS details of a failed connection into
// its messages; the Serving's status, which its namespace reads, keeps the rest of the message.
func TestArgoCDsMessagesReachTheTenantWithoutAddresses(t *testing.T) {
	f := newFixture(t)
	f.cluster("a40", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	const leak = "10.20.30.40"
	f.playArgoCD("a40", "Unknown", "Unknown", prep.Spec.Artifact.Digest, map[string]any{
		"type":    "ComparisonError",
		"message": `Failed to load live state: Get "https://` + leak + `:6443/version": x509: certificate signed by unknown authority (possibly because of "crypto/rsa: verification error" while trying to verify candidate authority certificate "kubernetes")`,
	})
	f.eventually("the cluster's Argo CD error in the status", func() error {
		tg := f.target(f.serving(), "a40")
		if tg == nil || len(tg.Conditions) == 0 || !strings.Contains(tg.Conditions[0].Message, "Failed to load live state") {
			return fmt.Errorf("target %+v", tg)
		}
		msg := tg.Conditions[0].Message
		if strings.Contains(msg, leak) || strings.Contains(msg, "unknown authority") || !strings.Contains(msg, "<address>") {
			t.Fatalf("the tenant reads %q", msg)
		}
		return nil
	})
}
