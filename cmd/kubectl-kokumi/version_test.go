package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeStampsTheVersionIntoThePlugin builds the plugin as `make kubectl-kokumi` does, with
// the Makefile's VERSION_LDFLAGS, and runs `kubectl-kokumi version`: the version and commit
// given to make are the ones it prints.
func TestMakeStampsTheVersionIntoThePlugin(t *testing.T) {
	bin := t.TempDir()
	out, err := exec.Command("make", "-s", "-C", "../..", "kubectl-kokumi", "BIN="+bin, "VERSION=9.8.7-test", "COMMIT=0123456789abcdef").CombinedOutput()
	if err != nil {
		t.Fatalf("make kubectl-kokumi: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(bin, "kubectl-kokumi"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-kokumi version: %v\n%s", err, out)
	}
	if want := "kubectl-kokumi 9.8.7-test (commit 0123456789abcdef, go"; !strings.HasPrefix(string(out), want) {
		t.Errorf("kubectl-kokumi version printed %q, want it to begin with %q", out, want)
	}
}
