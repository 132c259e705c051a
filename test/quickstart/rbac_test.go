// Package quickstart runs the steps of docs/quickstart.md that need no member cluster, as
// written, on a real API server.
package quickstart

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// rbacSection is the heading of the quickstart's section that binds a person to edit.
const rbacSection = "## 4. Let a person deliver in a namespace"

// The quickstart's RBAC steps run as written on a hub set up as `kokumi dev` sets it up:
// kube-controller-manager's ClusterRole aggregation controller running (the one the hub runs,
// HubControllers) and config/rbac's roles for people installed. A ServiceAccount bound to edit
// in platform may order, promote and read there, may not change an Environment, and is refused
// in kokumi-system and on Clusters: each printed answer must be the one the doc shows.
func TestQuickstartRBACStepsRunAsWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := harness.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := sandbox.InstallPeopleRBAC(ctx, env.Client, env.Assets.Root); err != nil {
		t.Fatal(err)
	}
	if err := env.CreateNamespace(ctx, "platform"); err != nil { // the demo's tenant namespace
		t.Fatal(err)
	}
	// Nothing but the aggregation controller fills edit: the API server leaves it empty.
	if ok, err := sandbox.Aggregated(ctx, env.Client, "edit"); err != nil || ok {
		t.Fatalf("edit holds kokumi-tenant's rules before any controller ran (%v, %v)", ok, err)
	}
	if err := env.StartControllers(env.Assets, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"admin", "edit", "view"} {
		waitFor(ctx, t, "ClusterRole "+role+" aggregated", func() (bool, error) { return sandbox.Aggregated(ctx, env.Client, role) })
	}

	steps := docSteps(t, filepath.Join(env.Assets.Root, "docs", "quickstart.md"), rbacSection)
	checked := 0
	for i, s := range steps {
		cmd := exec.CommandContext(ctx, "sh", "-c", s.script)
		cmd.Dir = env.Assets.Root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if !s.hasOutput {
			if err != nil {
				t.Fatalf("step %d of %q failed: %v\n%s\n%s", i+1, rbacSection, err, s.script, out)
			}
			continue
		}
		if got := strings.TrimSpace(string(out)); got != s.output {
			t.Errorf("step %d of %q printed\n%s\nthe doc shows\n%s", i+1, rbacSection, got, s.output)
		}
		checked++
	}
	if len(steps) < 3 || checked == 0 {
		t.Fatalf("found %d steps (%d with their output) in %q: the doc changed shape", len(steps), checked, rbacSection)
	}
}

// step is a shell block of the doc and, when the doc shows it, what it prints.
type step struct {
	script    string
	output    string
	hasOutput bool
}

// docSteps reads the ```sh blocks of a section of a Markdown file, each with the plain ```
// block that follows it (blank lines between at most) as its output.
func docSteps(t *testing.T, path, heading string) []step {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		steps           []step
		in, found       bool
		block           []string
		lang            string
		outputMayFollow bool
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !in && block == nil && strings.HasPrefix(line, "## ") {
			in = line == heading
			found = found || in
			continue
		}
		if !in {
			continue
		}
		if fence, ok := strings.CutPrefix(line, "```"); ok {
			if block == nil {
				lang, block = fence, []string{}
				continue
			}
			text := strings.Join(block, "\n")
			switch {
			case lang == "sh":
				steps = append(steps, step{script: text})
				outputMayFollow = true
			case lang == "" && outputMayFollow:
				steps[len(steps)-1].output, steps[len(steps)-1].hasOutput = strings.TrimSpace(text), true
				outputMayFollow = false
			}
			block = nil
			continue
		}
		if block != nil {
			block = append(block, line)
		} else if strings.TrimSpace(line) != "" {
			outputMayFollow = false
		}
	}
	if !found {
		t.Fatalf("%s has no section %q", path, heading)
	}
	return steps
}

// waitFor polls cond every 100 ms until it holds, fails, or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not before %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
