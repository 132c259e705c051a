// Package egress is the one policy of what Kokumi's controller reaches over HTTP on an
// Environment's behalf: the requests of its HTTP gates (internal/verify) and of its webhooks
// (internal/notify). An Environment is an admin's, but what answers at its URLs may be a
// tenant's (a canary's health endpoint), so the controller never goes where an answer sends it
// and never reaches the addresses that hold the node's and the cloud's secrets:
//
//   - a redirect is not followed (Policy.Redirects RedirectsNone, the default), or only to the
//     same scheme, host and port (RedirectsSameOrigin); the caller gets the 3xx as the answer;
//   - the address dialed, after DNS resolution, is checked in the dialer's Control hook, so a
//     name that resolves (or rebinds) to a refused address is refused too: loopback,
//     link-local (169.254.169.254, the cloud's metadata service, among them), multicast,
//     broadcast, unspecified ("this network", 0.0.0.0/8) and the cloud metadata addresses
//     outside those ranges (fd00:ec2::254, 100.100.100.200), unless a prefix of
//     Policy.Allowed holds it (the controller's --verify-allowed-cidrs);
//   - no proxy of the environment is used (it would dial for the controller where no check
//     runs), and an answer's headers are bounded (MaxHeaderBytes).
//
// Private addresses (10/8, 172.16/12, 192.168/16, fc00::/7) are reached: Prometheus and a
// webhook relay in the hub's own network are what gates and notifications are for.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Redirects says which redirects a Policy's client follows.
type Redirects string

const (
	// RedirectsNone follows no redirect: the 3xx is the answer.
	RedirectsNone Redirects = "none"
	// RedirectsSameOrigin follows a redirect to the same scheme, host and port (a path moved),
	// at most MaxRedirects of them; any other is the answer.
	RedirectsSameOrigin Redirects = "same-origin"
)

// MaxRedirects is the most redirects a RedirectsSameOrigin client follows for one request.
const MaxRedirects = 5

// MaxHeaderBytes bounds the headers of an answer.
const MaxHeaderBytes = 64 << 10

// FlagAllowedCIDRs is the controller's flag that sets Policy.Allowed; a refusal names it.
const FlagAllowedCIDRs = "verify-allowed-cidrs"

// Policy is what the controller may reach on an Environment's behalf. The zero value refuses
// every refused range and follows no redirect.
type Policy struct {
	// Allowed are the prefixes reached even though a refused range holds them, such as
	// 127.0.0.0/8 where the controller runs on the host it checks (make demo, the e2e fleet),
	// or a link-local address a site serves a health check on.
	Allowed []netip.Prefix
	// Redirects is which redirects are followed; empty is RedirectsNone.
	Redirects Redirects
	// Resolver resolves host names; nil is the system's. Whatever it answers, the address
	// dialed is checked.
	Resolver *net.Resolver
}

// refused are the ranges a Policy refuses, with what they are, for the message.
var refused = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"},
}

// RefusedError is an address the policy does not let the controller reach.
type RefusedError struct {
	// Addr is the address refused, as dialed (after DNS resolution).
	Addr netip.Addr
	// What it is: loopback, link-local, multicast, broadcast, unspecified or cloud metadata.
	What string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s is a %s address, which Kokumi does not reach for an Environment: an admin allows it with the controller's --%s",
		e.Addr, e.What, FlagAllowedCIDRs)
}

// Check says whether addr may be reached: nil, or a *RefusedError.
func (p Policy) Check(addr netip.Addr) error {
	addr = addr.Unmap().WithZone("")
	for _, a := range p.Allowed {
		if a.Contains(addr) {
			return nil
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(addr) {
			return &RefusedError{Addr: addr, What: r.what}
		}
	}
	return nil
}

// control is the dialer's Control hook: it runs once the address is resolved, before the
// connection is made, for every address tried.
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("the address dialed, %q, is not an IP address and port: %w", address, err)
	}
	return p.Check(ap.Addr())
}

// Dialer is a dialer that reaches only what the policy allows.
func (p Policy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: p.Resolver, Control: p.control}
}

// Transport is an HTTP transport that dials through Dialer, uses no proxy, and bounds an
// answer's headers.
func (p Policy) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            p.Dialer().DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: MaxHeaderBytes,
	}
}

// Client is an HTTP client of Transport that follows the redirects the policy allows, and
// returns any other 3xx as the answer (its Location unfollowed). It has no timeout of its own:
// each request's context bounds it.
func (p Policy) Client() *http.Client {
	return &http.Client{Transport: p.Transport(), CheckRedirect: p.checkRedirect}
}

func (p Policy) checkRedirect(req *http.Request, via []*http.Request) error {
	if p.Redirects == RedirectsSameOrigin && len(via) > 0 && len(via) <= MaxRedirects && SameOrigin(via[0].URL, req.URL) {
		return nil
	}
	return http.ErrUseLastResponse
}

// SameOrigin says whether a and b have the same scheme, host and port (the scheme's default
// port when none is written).
func SameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// IsRedirect says whether resp is a redirect the client did not follow: a 3xx with a Location.
func IsRedirect(resp *http.Response) bool {
	return resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != ""
}

// Refused returns the *RefusedError in err's chain, or nil.
func Refused(err error) *RefusedError {
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// ParseCIDRs reads a comma-separated list of prefixes (a bare address is its own /32 or /128),
// for the flag named field; an entry that is neither is an error naming it.
func ParseCIDRs(field, list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is neither a CIDR prefix (such as 10.0.0.0/8) nor an IP address", field, s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ParseRedirects reads a Redirects value for the flag named field.
func ParseRedirects(field, v string) (Redirects, error) {
	switch r := Redirects(strings.TrimSpace(v)); r {
	case RedirectsNone, RedirectsSameOrigin:
		return r, nil
	case "":
		return RedirectsNone, nil
	default:
		return "", fmt.Errorf("--%s: %q is neither %s nor %s", field, v, RedirectsNone, RedirectsSameOrigin)
	}
}

// Loopback are the loopback prefixes, for a Policy where the controller runs on the host it
// checks.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
