package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/kokumi-dev/kokumi/internal/egress/egresstest"
)

// server serves h on addr, counting the requests (egresstest.Serve).
var server = egresstest.Serve

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

func TestTheDefaultPolicyRefusesLoopbackLinkLocalAndMetadataAddresses(t *testing.T) {
	srv, hits := server(t, "127.0.0.1:0", ok)
	_, err := get(t, Policy{}.Client(), srv.URL)
	r := Refused(err)
	if r == nil || r.What != "loopback" || !strings.Contains(err.Error(), "--verify-allowed-cidrs") || hits.Load() != 0 {
		t.Fatalf("loopback: %v (%d requests reached it)", err, hits.Load())
	}
	// The cloud's metadata service: refused before any packet is sent.
	for _, tc := range []struct{ url, what string }{
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "link-local"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"},
		{"http://100.100.100.200/latest/meta-data/", "cloud metadata"},
		{"http://[::ffff:127.0.0.1]:1/", "loopback"},
		{"http://0.0.0.0:1/", "unspecified"},
		{"http://224.0.0.1:1/", "multicast"},
	} {
		_, err := get(t, Policy{}.Client(), tc.url)
		if r := Refused(err); r == nil || r.What != tc.what {
			t.Errorf("%s: %v, want a refusal as %s", tc.url, err, tc.what)
		}
	}
	// A private address is reached (none listens on this one: refused by the network, not
	// the policy).
	if err := (Policy{}).Check(netip.MustParseAddr("10.96.0.1")); err != nil {
		t.Errorf("a private address is refused: %v", err)
	}
}

func TestAnAllowedPrefixIsReached(t *testing.T) {
	srv, hits := server(t, "127.0.0.1:0", ok)
	resp, err := get(t, Policy{Allowed: Loopback}.Client(), srv.URL)
	if err != nil || resp.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("allowed loopback: %v %v", resp, err)
	}
	// Only what the prefix holds: 127.0.0.2/32 does not hold 127.0.0.1.
	only, _ := ParseCIDRs(FlagAllowedCIDRs, "127.0.0.2")
	if _, err := get(t, Policy{Allowed: only}.Client(), srv.URL); Refused(err) == nil {
		t.Fatalf("127.0.0.1 reached with only 127.0.0.2 allowed: %v", err)
	}
}

// A name that resolves to loopback is refused: the address dialed is checked, not the name.
func TestANameThatResolvesToLoopbackIsRefused(t *testing.T) {
	srv, hits := server(t, "127.0.0.1:0", ok)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if _, err := get(t, Policy{}.Client(), "http://localhost:"+port+"/"); Refused(err) == nil {
		t.Errorf("localhost: %v", err)
	}
	// A name of the tenant's own DNS, which answers loopback (or rebinds to it after a first
	// public answer): a real DNS server on loopback answers every name with 127.0.0.1.
	dns := dnsServer(t, netip.MustParseAddr("127.0.0.1"))
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, dns)
	}}
	_, err := get(t, Policy{Resolver: resolver}.Client(), "http://canary.tenant.example:"+port+"/healthz")
	if r := Refused(err); r == nil || r.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("a name resolving to loopback: %v", err)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the loopback server", hits.Load())
	}
	// The same name, with loopback allowed, is reached: the resolver was used.
	if resp, err := get(t, Policy{Resolver: resolver, Allowed: Loopback}.Client(), "http://canary.tenant.example:"+port+"/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("the name with loopback allowed: %v %v", resp, err)
	}
}

// dnsServer answers every A question with addr, over UDP on loopback, and returns its address.
func dnsServer(t *testing.T, addr netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: addr.As4()})
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func TestARedirectIsTheAnswerNotFollowed(t *testing.T) {
	other, otherHits := server(t, "127.0.0.1:0", ok)
	var to atomic.Value
	gate, _ := server(t, "127.0.0.2:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			_, _ = w.Write([]byte("moved here"))
			return
		}
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	})
	// Only the gate's own address is allowed.
	allowed, err := ParseCIDRs(FlagAllowedCIDRs, "127.0.0.2/32")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{other.URL + "/", "http://169.254.169.254/latest/meta-data/", gate.URL + "/moved"} {
		to.Store(target)
		resp, err := get(t, Policy{Allowed: allowed}.Client(), gate.URL+"/healthz")
		if err != nil || resp.StatusCode != http.StatusFound || !IsRedirect(resp) {
			t.Errorf("a redirect to %s: %v %v, want the 302 as the answer", target, resp, err)
		}
	}
	if otherHits.Load() != 0 {
		t.Errorf("the redirect was followed: %d requests", otherHits.Load())
	}
	// Same origin: a path moved is followed, another port is not.
	same := Policy{Allowed: allowed, Redirects: RedirectsSameOrigin}
	to.Store(gate.URL + "/moved")
	if resp, err := get(t, same.Client(), gate.URL+"/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("same origin: %v %v", resp, err)
	}
	to.Store(other.URL + "/")
	if resp, err := get(t, same.Client(), gate.URL+"/healthz"); err != nil || resp.StatusCode != http.StatusFound || otherHits.Load() != 0 {
		t.Errorf("another port under same-origin: %v %v (%d requests reached it)", resp, err, otherHits.Load())
	}
	// A redirect to itself, for ever: the last 3xx is the answer after MaxRedirects.
	to.Store(gate.URL + "/healthz")
	if resp, err := get(t, same.Client(), gate.URL+"/healthz"); err != nil || resp.StatusCode != http.StatusFound {
		t.Errorf("a loop: %v %v", resp, err)
	}
}

func TestBadFlagValuesNameTheFlag(t *testing.T) {
	if _, err := ParseCIDRs(FlagAllowedCIDRs, "10.0.0.0/8, 127.0.0.1 ,fd00::/8"); err != nil {
		t.Errorf("good list: %v", err)
	}
	if _, err := ParseCIDRs(FlagAllowedCIDRs, "10.0.0.0/8,localhost"); err == nil || !strings.Contains(err.Error(), `--verify-allowed-cidrs: "localhost" is neither`) {
		t.Errorf("bad entry: %v", err)
	}
	if _, err := ParseRedirects("verify-redirects", "all"); err == nil || !strings.Contains(err.Error(), `--verify-redirects: "all" is neither none nor same-origin`) {
		t.Errorf("bad redirects: %v", err)
	}
	var r *RefusedError
	if !errors.As(Policy{}.Check(netip.MustParseAddr("fe80::1%eth0")), &r) || r.What != "link-local" {
		t.Errorf("a zoned link-local address: %v", r)
	}
}
