package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// ListFlag collects a repeated flag's values.
type ListFlag []string

// String implements flag.Value.
func (l *ListFlag) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *ListFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// Sizes reads a comma-separated list of positive numbers (underscores allowed: 10_000), the
// value of the flag -name.
func Sizes(name, list string) ([]int, error) {
	var sizes []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), "_", ""))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive number", name, s)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// KokumiBinary is given when it is set, else the repository's ./cmd/kokumi built into a
// temporary directory that cleanup removes.
func KokumiBinary(ctx context.Context, given string) (bin string, cleanup func(), err error) {
	if given != "" {
		return given, func() {}, nil
	}
	assets, err := sandbox.FindAssets()
	if err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "kokumi-bench-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("create a temporary directory: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	if bin, err = BuildKokumi(ctx, assets.Root, tmp); err != nil {
		cleanup()
		return "", nil, err
	}
	return bin, cleanup, nil
}
