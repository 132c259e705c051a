package isolate_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

// envReadRestricted makes this test binary, started by TestARenderChildCannotOpenWhatARenderDoesNotRead,
// hold itself to what a render child reads (isolate.Restrict, as runChild does) and try to read the
// file it names.
const envReadRestricted = "KOKUMI_TEST_READ_RESTRICTED"

// readRestricted is the restricted process: it prints what opening path and /proc/self/status gave.
func readRestricted(path string) int {
	if err := isolate.Restrict(); err != nil {
		fmt.Println("restrict:", err)
		return 1
	}
	_, err := os.ReadFile(path)
	_, statusErr := os.ReadFile("/proc/self/status")
	fmt.Printf("token: %v; eacces: %v; status: %v\n", err, errors.Is(err, syscall.EACCES), statusErr)
	return 0
}

// A render child, held by Landlock where the kernel offers it, cannot open a file a render does
// not read (the Pod's ServiceAccount token, here a file of this test's), and still reads what
// it reads itself (/proc/self/status). Every render of this package's other tests runs in such a
// child: rendering needs nothing more.
func TestARenderChildCannotOpenWhatARenderDoesNotRead(t *testing.T) {
	abi, err := isolate.Supported()
	if err != nil || abi < 1 {
		t.Skipf("this kernel (%s) offers no Landlock (ABI %d, %v): a render child is held by its rlimits, its empty environment and its missing credentials only", kernel(), abi, err)
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("eyJhbGciOi..."), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(token); err != nil {
		t.Fatalf("this process cannot read the token itself: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envReadRestricted+"="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the restricted process: %v: %s", err, out)
	}
	t.Logf("Landlock ABI %d on %s: %s", abi, kernel(), strings.TrimSpace(string(out)))
	if !strings.Contains(string(out), "eacces: true") || !strings.Contains(string(out), "status: <nil>") {
		t.Errorf("the restricted process: %s, want EACCES for the token and /proc/self/status read", out)
	}
}

// kernel is the kernel's release.
func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "an unknown kernel"
	}
	return "Linux " + strings.TrimSpace(string(b))
}
