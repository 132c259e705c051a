package server

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kokumi-dev/kokumi/internal/server"
)

// signedIn reports whether the session cookie still signs in at url.
func signedIn(t *testing.T, url string, cookie *http.Cookie) bool {
	t.Helper()
	var me server.Me
	do(t, call{server: url, path: "/api/v1/me", cookie: cookie}, &me)
	return me.Authenticated
}

// Any valid token passes a TokenReview, a pod's ServiceAccount token with no RBAC at all
// included. A loop of logins with such tokens logs nobody else out and keeps the server's
// sessions, and so its memory, bounded: each identity keeps its own few sessions and is
// throttled, and a full table refuses new logins rather than ending anyone's.
func TestALoginLoopLogsNobodyOut(t *testing.T) {
	url := ownServer(t, server.Options{MaxSessions: 40})
	victim := serviceAccountToken(t, "sessions-victims", "alice")
	bindClusterRole(t, "sessions-victims", "view", "sessions-victims", "alice")
	alice := login(t, url, victim)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	counts := map[int]int{}
	start := time.Now()
	for i := range 4 {
		attacker := serviceAccountToken(t, "sessions-attackers", fmt.Sprintf("pod-%d", i)) // no RBAC at all
		for range 200 {
			res := do(t, call{server: url, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": attacker}}, nil)
			counts[res.StatusCode]++
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("800 logins by 4 identities in %s: %v (status → count); heap in use %d KiB → %d KiB",
		time.Since(start).Round(time.Millisecond), counts, before.HeapInuse/1024, after.HeapInuse/1024)
	if !signedIn(t, url, alice) {
		t.Fatal("the loop of logins logged alice out")
	}
	// Each identity got its burst of logins at most (and a few more as time passed), then 429.
	if ok := counts[http.StatusOK]; ok > 4*(server.DefaultLoginBurst+int(time.Since(start)/server.DefaultLoginInterval)+1) {
		t.Errorf("%d logins accepted, beyond the identities' bursts", ok)
	}
	if counts[http.StatusTooManyRequests] == 0 {
		t.Error("no login of the loop was throttled")
	}
	// 4 identities × 16 sessions would be 64: the table of 40 refused the rest with 503.
	if counts[http.StatusServiceUnavailable] == 0 {
		t.Error("a full sessions table accepted more logins")
	}
	// alice signs in again once the table has room: her own old session went nowhere.
	if !signedIn(t, url, alice) {
		t.Fatal("alice lost her session")
	}
}

// Behind a TLS ingress every request comes from the ingress's address: one person's bad tokens
// must not lock out everyone else, and a token the cluster accepts is never throttled.
func TestTheThrottleBehindAProxyHoldsOnlyTheGuesser(t *testing.T) {
	good := serviceAccountToken(t, "sessions-proxy", "bob")
	fresh := serviceAccountToken(t, "sessions-proxy", "carol")
	guess := func(url, from string) int {
		res := do(t, call{server: url, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": "guessed-" + from},
			header: http.Header{"X-Forwarded-For": {from}}}, nil)
		return res.StatusCode
	}
	loginFrom := func(url, tok, from string) int {
		res := do(t, call{server: url, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": tok},
			header: http.Header{"X-Forwarded-For": {from}}}, nil)
		return res.StatusCode
	}

	// The proxy (the test's loopback address) is trusted: the client is X-Forwarded-For's.
	url := ownServer(t, server.Options{TrustedProxies: []string{"127.0.0.1/32", "::1"}})
	throttled := false
	for range 3 * server.DefaultFailedLoginBurst {
		throttled = guess(url, "203.0.113.7") == http.StatusTooManyRequests || throttled
	}
	if !throttled {
		t.Fatal("the guesser behind the proxy was never throttled")
	}
	if got := loginFrom(url, good, "198.51.100.9"); got != http.StatusOK {
		t.Errorf("another person behind the same proxy: status %d, want 200", got)
	}
	if got := loginFrom(url, fresh, "203.0.113.7"); got != http.StatusOK {
		t.Errorf("a token the cluster accepts, from the guesser's own address: status %d, want 200", got)
	}
	if res := do(t, call{server: url, path: "/api/v1/me", bearer: good, header: http.Header{"X-Forwarded-For": {"203.0.113.7"}}}, nil); res.StatusCode != http.StatusOK {
		t.Errorf("a good bearer token from the guesser's address: status %d, want 200", res.StatusCode)
	}

	// Without trusted proxies, everyone behind the ingress shares its address: the guesser's
	// failures count against the guessed token, and a good one still signs in.
	shared := ownServer(t, server.Options{})
	for range 3 * server.DefaultFailedLoginBurst {
		guess(shared, "ignored")
	}
	if got := loginFrom(shared, serviceAccountToken(t, "sessions-proxy", "dave"), "ignored"); got != http.StatusOK {
		t.Errorf("a good token from the shared address after someone's guesses: status %d, want 200", got)
	}
}

// A session lasts no longer than the identity it was opened for: a deleted ServiceAccount (or
// a revoked token) is signed out at the next review of its token.
func TestADeletedIdentityIsSignedOut(t *testing.T) {
	url := ownServer(t, server.Options{Revalidate: time.Second})
	tok := serviceAccountToken(t, "sessions-revoked", "erin")
	cookie := login(t, url, tok)
	if !signedIn(t, url, cookie) {
		t.Fatal("a fresh session is not signed in")
	}
	must(t, env.Client.Delete(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sessions-revoked", Name: "erin"}}))
	// A review's answer is reused for 30 s, the session is reviewed again every second, and a
	// loaded machine adds its delay to both: the bound is the sum with a margin.
	deadline := time.Now().Add(45 * time.Second)
	for signedIn(t, url, cookie) {
		if time.Now().After(deadline) {
			t.Fatal("the session of a deleted ServiceAccount still signs in")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// The server acts for people with their own token: its ServiceAccount holds no impersonation
// grant, which would make it cluster-admin in effect (system:masters).
func TestTheServerCannotImpersonate(t *testing.T) {
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "groups", Name: "system:masters"},
		{Verb: "impersonate", Resource: "users", Name: "admin"},
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "kube-system", Name: "default"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids"},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: serverUser, ResourceAttributes: &a}}
		must(t, env.Client.Create(context.Background(), review))
		if review.Status.Allowed {
			t.Errorf("the server's role may %s %s %s", a.Verb, a.Resource, a.Name)
		}
	}
}
