package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DocSection is a section of a doc whose shell steps a test runs as written: from its heading
// to the next heading of the same or a higher level.
type DocSection struct {
	// Path is the doc's path from the repository root.
	Path string
	// Heading is the section's heading line.
	Heading string
}

// headingLevel is the level of a Markdown heading line (2 for "## …"), 0 for another line.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

// QuickstartRBAC is the quickstart's section that binds a person to edit in the demo's
// namespace and asks what they may do.
var QuickstartRBAC = DocSection{Path: "docs/quickstart.md", Heading: "## 4. Let a person deliver in a namespace"}

// QuickstartClusterAdd is the quickstart's subsection that registers the member the demo left
// out (sandbox.DemoPluginMember) with the kubectl plugin.
var QuickstartClusterAdd = DocSection{Path: "docs/quickstart.md", Heading: "### Register the third member with `kubectl kokumi cluster add`"}

// DocStep is a ```sh block of a doc and, when the doc shows it, what it prints.
type DocStep struct {
	// Script is the block's text.
	Script string
	// Output is the plain ``` block that follows it, trimmed.
	Output string
	// HasOutput says whether the doc shows what the block prints.
	HasOutput bool
}

// Steps reads the ```sh blocks of the section from the checkout at root, each with the plain
// ``` block that follows it (blank lines between at most) as its output.
func (d DocSection) Steps(root string) ([]DocStep, error) {
	path := filepath.Join(root, d.Path)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the doc: %w", err)
	}
	var (
		steps           []DocStep
		in, found       bool
		level           int
		block           []string
		lang            string
		outputMayFollow bool
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if l := headingLevel(line); block == nil && l > 0 {
			switch {
			case line == d.Heading:
				in, found, level = true, true, l
			case in && l <= level:
				in = false
			}
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
				steps = append(steps, DocStep{Script: text})
				outputMayFollow = true
			case lang == "" && outputMayFollow:
				steps[len(steps)-1].Output, steps[len(steps)-1].HasOutput = strings.TrimSpace(text), true
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
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !found {
		return nil, fmt.Errorf("%s has no section %q", path, d.Heading)
	}
	return steps, nil
}

// Run runs the section's steps in order with sh, in the checkout at root and with
// KUBECONFIG=kubeconfig, as a reader would: a step whose output the doc shows must print
// exactly that (a refusal and its exit status are part of what it shows); any other step must
// succeed. It returns how many steps it ran and how many of their outputs it compared.
func (d DocSection) Run(ctx context.Context, root, kubeconfig string) (ran, compared int, err error) {
	steps, err := d.Steps(root)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for i, s := range steps {
		cmd := exec.CommandContext(ctx, "sh", "-c", s.Script)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, runErr := cmd.CombinedOutput()
		ran++
		if !s.HasOutput {
			if runErr != nil {
				return ran, compared, fmt.Errorf("step %d of %q failed: %w\n%s\n%s", i+1, d.Heading, runErr, s.Script, out)
			}
			continue
		}
		compared++
		if got := strings.TrimSpace(string(out)); got != s.Output {
			errs = append(errs, fmt.Errorf("step %d of %q printed\n%s\nthe doc shows\n%s", i+1, d.Heading, got, s.Output))
		}
	}
	return ran, compared, errors.Join(errs...)
}
