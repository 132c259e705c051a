package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/egress"
)

func TestEgressFlagsSetThePolicyOfGatesAndWebhooks(t *testing.T) {
	c, err := parseConfig(t)
	if err != nil || len(c.VerifyAllowedCIDRs) != 0 || c.Egress().Redirects != "" || c.VerifyWorkers != 16 {
		t.Fatalf("no flags: %+v %v", c.Egress(), err)
	}
	if err := c.Egress().Check(netip.MustParseAddr("169.254.169.254")); egress.Refused(err) == nil {
		t.Errorf("the default policy reaches the metadata service: %v", err)
	}
	c, err = parseConfig(t, "--verify-allowed-cidrs=127.0.0.0/8, ::1", "--verify-allowed-cidrs=169.254.10.0/24", "--verify-redirects=same-origin", "--verify-workers=4")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("169.254.10.0/24")}
	if !slices.Equal(c.VerifyAllowedCIDRs, want) || c.Egress().Redirects != egress.RedirectsSameOrigin || c.VerifyWorkers != 4 {
		t.Errorf("policy %+v, workers %d", c.Egress(), c.VerifyWorkers)
	}
	if err := c.Egress().Check(netip.MustParseAddr("169.254.10.7")); err != nil {
		t.Errorf("an allowed link-local address is refused: %v", err)
	}
	for _, bad := range []string{"--verify-allowed-cidrs=10.0.0.0/8,metadata", "--verify-redirects=all"} {
		if _, err := parseConfig(t, bad); err == nil || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(bad, "--"), "=", 2)[0]) {
			t.Errorf("%s: %v, want an error naming the flag", bad, err)
		}
	}
}
