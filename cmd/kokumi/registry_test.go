package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

func TestRegistryCommandStoresAndServesArtifacts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- run(ctx, []string{"registry", "--addr", addr, "--dir", dir}, &out, &out) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry did not listen on %s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	d := ocitest.PushBundle(t, addr+"/kokumi/test", "v1", map[string]string{"a.yaml": "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n"})
	pulled, err := (&oci.Client{}).Pull(ctx, addr+"/kokumi/test", "v1")
	if err != nil || pulled.Digest != d {
		t.Fatalf("pull back: %v, digest %v want %s", err, pulled, d)
	}
	if _, err := os.Stat(filepath.Join(dir, "docker/registry/v2/repositories/kokumi/test")); err != nil {
		t.Errorf("the registry keeps nothing under --dir: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("registry command: %v", err)
	}
}
