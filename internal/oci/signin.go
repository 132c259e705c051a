package oci

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// signInMaxAge is how long SignIn keeps what Credential said.
const signInMaxAge = time.Minute

// SignIn is an http.RoundTripper that signs requests to one registry host in with Basic
// authentication. It reads the credential when first needed and keeps it for a minute, and
// reads it again after the registry answered 401, so that a client made before the
// credential exists, or kept across a rotation, signs in with the current one. Requests to
// other hosts, and requests that carry an Authorization header already, pass as they are.
type SignIn struct {
	// Host is the registry's host[:port].
	Host string
	// Credential reads the credential; ok false sends requests anonymously.
	Credential func(ctx context.Context) (cred Credential, ok bool, err error)
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper

	mu   sync.Mutex
	cred Credential
	ok   bool
	at   time.Time
}

// RoundTrip implements http.RoundTripper.
func (s *SignIn) RoundTrip(req *http.Request) (*http.Response, error) {
	base := s.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if req.URL.Host != s.Host || req.Header.Get("Authorization") != "" {
		return base.RoundTrip(req)
	}
	cred, ok, err := s.credential(req.Context())
	if err != nil {
		return nil, fmt.Errorf("sign in to %s: %w", s.Host, err)
	}
	if ok {
		req = req.Clone(req.Context())
		req.SetBasicAuth(cred.Username, cred.Password)
	}
	resp, err := base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		s.mu.Lock()
		s.at = time.Time{}
		s.mu.Unlock()
	}
	return resp, err
}

func (s *SignIn) credential(ctx context.Context) (Credential, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < signInMaxAge {
		return s.cred, s.ok, nil
	}
	cred, ok, err := s.Credential(ctx)
	if err != nil {
		return Credential{}, false, err
	}
	s.cred, s.ok, s.at = cred, ok, time.Now()
	return cred, ok, nil
}
