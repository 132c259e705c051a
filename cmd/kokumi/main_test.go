package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/version"
)

func TestHelpOfEveryCommandExitsZeroWithItsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"controller", "--help"}, {"server", "-h"}, {"dev", "--help"}, {"registry", "-h"}, {"public-key", "--help"}, {"admission", "-h"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			var exit bytes.Buffer
			if code := exitCode(err, &exit); code != 0 {
				t.Errorf("exit code %d (%v), want 0", code, err)
			}
			if strings.Contains(exit.String(), "help requested") {
				t.Errorf("printed %q", exit.String())
			}
			if out := stdout.String() + stderr.String(); !strings.Contains(out, "Usage") {
				t.Errorf("no usage printed: %q", out)
			}
		})
	}
}

func TestAnUnknownCommandFailsWithTheUsage(t *testing.T) {
	var stdout, stderr, exit bytes.Buffer
	err := run(context.Background(), []string{"deploy"}, &stdout, &stderr)
	if code := exitCode(err, &exit); code != 1 || !strings.Contains(exit.String(), `unknown command "deploy"`) {
		t.Errorf("exit %d, %q", code, exit.String())
	}
	if !strings.Contains(stderr.String(), "Usage:") {
		t.Errorf("no usage on stderr: %q", stderr.String())
	}
}

func TestVersionPrintsTheVersionAndCommitItWasBuiltWith(t *testing.T) {
	oldVersion, oldCommit := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldVersion, oldCommit })
	version.Version, version.Commit = "v1.2.3", "0123456789ab"
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	line := stdout.String()
	for _, want := range []string{"kokumi v1.2.3", "commit 0123456789ab", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(line, want) {
			t.Errorf("kokumi version printed %q, missing %q", line, want)
		}
	}
}
