package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

func TestSessionsExpire(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAuth("secret", nil, time.Hour, 10, 2, time.Minute)
	a.now = func() time.Time { return now }
	id, _, ok, err := a.authenticate(context.Background(), "secret")
	if err != nil || !ok || !id.Admin {
		t.Fatalf("the admin token: %+v %v %v", id, ok, err)
	}
	sid, err := a.open(id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.session(context.Background(), sid); !ok {
		t.Fatal("a fresh session is not valid")
	}
	now = now.Add(61 * time.Minute)
	if _, ok, _ := a.session(context.Background(), sid); ok {
		t.Fatal("a session past its TTL is still valid")
	}
	// A session lasts no longer than the token it was opened with.
	sid, err = a.open(id, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, ok, _ := a.session(context.Background(), sid); ok {
		t.Fatal("a session outlives its token")
	}
	if a.isAdminToken("") || a.isAdminToken("secre") || !a.isAdminToken("secret") {
		t.Fatal("token comparison is wrong")
	}
}

func TestWithoutAnAdminTokenNothingIsTheAdminToken(t *testing.T) {
	a := newAuth("", nil, time.Hour, 10, 2, time.Minute)
	for _, token := range []string{"", "secret", "kokumi:admin-token"} {
		if a.isAdminToken(token) {
			t.Errorf("%q signs in as the admin of a server without an admin token", token)
		}
	}
	if _, _, ok, err := a.authenticate(context.Background(), ""); ok || err != nil {
		t.Errorf("an empty token signs in: %v %v", ok, err)
	}
}

func TestTokenExpiryReadsTheJWT(t *testing.T) {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1767225600,"sub":"system:serviceaccount:a:b"}`))
	if exp, ok := tokenExpiry("eyJhbGciOiJSUzI1NiJ9." + payload + ".c2ln"); !ok || !exp.Equal(time.Unix(1767225600, 0)) {
		t.Errorf("exp %v %v", exp, ok)
	}
	for _, token := range []string{"opaque", "a.b.c", "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".c"} {
		if _, ok := tokenExpiry(token); ok {
			t.Errorf("%q has an expiry", token)
		}
	}
}

func TestCookiesAreSecureOffLoopback(t *testing.T) {
	on, off := true, false
	for _, c := range []struct {
		o    Options
		want bool
	}{
		{Options{Addr: ":8090"}, true},
		{Options{Addr: "0.0.0.0:8090"}, true},
		{Options{Addr: "10.0.0.1:8090"}, true},
		{Options{Addr: "127.0.0.1:8090"}, false},
		{Options{Addr: "[::1]:8090"}, false},
		{Options{Addr: "localhost:8090"}, false},
		{Options{Addr: "127.0.0.1:8090", SecureCookies: &on}, true},
		{Options{Addr: ":8090", SecureCookies: &off}, false},
		{Options{Addr: "127.0.0.1:8090", SecureCookies: &off, TLSCertFile: "c", TLSKeyFile: "k"}, true},
	} {
		if got := c.o.secureCookies(); got != c.want {
			t.Errorf("%+v: Secure %v, want %v", c.o, got, c.want)
		}
	}
}

func TestTTLCacheIsBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newTTLCache[string, int](3)
	c.now = func() time.Time { return now }
	for i := range 3 {
		c.put(fmt.Sprint(i), i, now.Add(time.Duration(i+1)*time.Minute))
	}
	c.put("3", 3, now.Add(time.Hour)) // full: "0" expires first and goes
	if _, ok := c.get("0"); ok {
		t.Error("the entry that expires first was kept")
	}
	for _, k := range []string{"1", "2", "3"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	now = now.Add(150 * time.Second) // "1" expired at 2m
	if _, ok := c.get("1"); ok {
		t.Error("an expired entry is returned")
	}
	c.delete("3")
	if _, ok := c.get("3"); ok || len(c.entries) > 3 {
		t.Errorf("delete kept 3, or the cache holds %d", len(c.entries))
	}
}

// A full table refuses a new login and ends nobody's session; an identity at its own cap ends
// its own oldest session, never another's.
func TestTheSessionTableRefusesRatherThanEvicts(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAuth("", nil, time.Hour, 3, 2, time.Hour)
	a.now = func() time.Time { return now }
	person := func(name string) Identity {
		return Identity{User: authenticationv1.UserInfo{Username: name}, token: name + "-token"}
	}
	victim, err := a.open(person("victim"), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var mallory []string
	for range 5 {
		sid, err := a.open(person("mallory"), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		mallory = append(mallory, sid)
	}
	if n := a.sessions.len(); n != 3 {
		t.Errorf("%d sessions, want the victim's and mallory's last 2", n)
	}
	if _, ok, _ := a.session(context.Background(), mallory[0]); ok {
		t.Error("mallory's oldest session outlived its identity's cap")
	}
	if _, err := a.open(person("eve"), time.Time{}); !errors.Is(err, errSessionsFull) {
		t.Errorf("a login into a full table: %v, want errSessionsFull", err)
	}
	if _, ok, _ := a.session(context.Background(), victim); !ok {
		t.Error("the victim was logged out by other people's logins")
	}
}
