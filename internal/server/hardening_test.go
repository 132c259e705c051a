package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestLimiterThrottlesFailuresAndStaysBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter(3, time.Second, 4)
	l.now = func() time.Time { return now }
	for range 3 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatal("a client is refused within its burst")
		}
		l.fail("a")
	}
	if ok, wait := l.allow("a"); ok || wait <= 0 || wait > time.Second {
		t.Fatalf("after its burst: allowed %v, wait %s", ok, wait)
	}
	now = now.Add(time.Second)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("no try came back after a second")
	}
	for i := range 100 {
		l.fail(fmt.Sprint("client-", i))
	}
	if n := len(l.buckets); n > 4 {
		t.Fatalf("%d clients tracked, want at most 4", n)
	}
}

func TestHostMatcher(t *testing.T) {
	m := newHostMatcher([]string{"kokumi.example.com", "*.ui.example.com"}, "0.0.0.0:8090", "kokumi-system")
	for host, want := range map[string]bool{
		"localhost:8090": true, "127.0.0.1": true, "[::1]:8090": true, "10.0.0.7:8090": true,
		"kokumi-server.kokumi-system.svc:80": true, "KOKUMI.example.com.": true, "a.ui.example.com": true,
		"evil.example": false, "ui.example.com.evil.example": false, "": false,
	} {
		if got := m.allows(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
}

// A refused Host's 421 carries the security headers every other answer carries.
func TestMisdirectedRequestCarriesSecurityHeaders(t *testing.T) {
	s := &Server{hosts: newHostMatcher(nil, "127.0.0.1:8090", "kokumi-system"), log: logr.Discard()}
	h := s.hardened(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	for host, code := range map[string]int{"evil.example": http.StatusMisdirectedRequest, "localhost": http.StatusOK} {
		req := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != code {
			t.Fatalf("Host %s: status %d, want %d", host, rec.Code, code)
		}
		for _, name := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy", "Cross-Origin-Resource-Policy"} {
			if rec.Header().Get(name) == "" {
				t.Errorf("Host %s: the %d answer lacks %s", host, code, name)
			}
		}
	}
}
