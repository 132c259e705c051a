package oci

import (
	"bytes"
	"testing"
)

func TestTarGzIsDeterministicAndRoundTrips(t *testing.T) {
	files := map[string][]byte{"b.yaml": []byte("b"), "a/x.yaml": []byte("x"), "c.yaml": nil}
	one, err := TarGz(files)
	if err != nil {
		t.Fatal(err)
	}
	two, err := TarGz(map[string][]byte{"c.yaml": nil, "a/x.yaml": []byte("x"), "b.yaml": []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one, two) {
		t.Error("the same files packed to different bytes")
	}
	back, err := UntarGz(one, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 3 || string(back["a/x.yaml"]) != "x" || string(back["b.yaml"]) != "b" {
		t.Errorf("round trip gave %v", back)
	}
	evil, _ := TarGz(map[string][]byte{"../escape.yaml": []byte("x")})
	if _, err := UntarGz(evil, true); err == nil {
		t.Error("an entry that leaves the archive was read")
	}
}

func TestParseDockerConfig(t *testing.T) {
	creds, err := ParseDockerConfig([]byte(`{"auths":{
		"https://index.docker.io/v1/":{"auth":"dXNlcjpwYXNz"},
		"ghcr.io":{"username":"bot","password":"token"},
		"127.0.0.1:5000":{"username":"","password":"bearer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]Credential{
		"docker.io": {"user", "pass"}, "index.docker.io": {"user", "pass"}, "ghcr.io": {"bot", "token"}, "127.0.0.1:5000": {"", "bearer"},
	} {
		if got, ok := creds.Lookup(host); !ok || got != want {
			t.Errorf("Lookup(%s) = %+v %v, want %+v", host, got, ok, want)
		}
	}
	if _, ok := creds.Lookup("quay.io"); ok {
		t.Error("quay.io has no credential")
	}
	if _, err := ParseDockerConfig([]byte(`{"auths":{"x":{"auth":"bm9jb2xvbg=="}}}`)); err == nil {
		t.Error("an auth without a colon parsed")
	}
}

func TestUsesPlainHTTPForLoopbackAndListedHosts(t *testing.T) {
	c := &Client{PlainHTTP: []string{"kokumi-registry.kokumi-system.svc:5000"}}
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "localhost:5000": true, "[::1]:5000": true,
		"kokumi-registry.kokumi-system.svc:5000": true, "ghcr.io": false, "10.0.0.1:5000": false,
	} {
		if got := c.UsesPlainHTTP(host); got != want {
			t.Errorf("UsesPlainHTTP(%s) = %v, want %v", host, got, want)
		}
	}
}
