package isolate

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Restrict holds this process, a render child, to what a render reads, with a Landlock ruleset
// where the kernel offers Landlock (Linux 5.13 and later, with Landlock among its security
// modules): its own /proc/self/status (the child's memory, read between renders), the time zones
// a template may name (/etc/localtime, /usr/share/zoneinfo), and nothing else of the file
// system, no TCP connection and no bind, no signal to a process outside it. A template reaches
// no file by itself (Helm gives it the chart's own files, in memory); the ruleset holds should
// one find a way, so that the Pod's ServiceAccount token
// (/var/run/secrets/kubernetes.io/serviceaccount/token), the registry credentials the
// controller reads and the rest of the controller's file system stay closed to the child. Where
// the kernel has no Landlock, or an older ABI, it restricts what that kernel can (best effort)
// and Supported says so. It applies to every thread of the process, and cannot be lifted.
func Restrict() error {
	err := landlock.V7.BestEffort().Restrict(
		landlock.ROFiles("/proc/self/status"),
		landlock.ROFiles("/etc/localtime").IgnoreIfMissing(),
		landlock.RODirs("/usr/share/zoneinfo").IgnoreIfMissing(),
	)
	if err != nil {
		return fmt.Errorf("hold the render's process to what it reads (Landlock): %w", err)
	}
	return nil
}

// Supported returns the kernel's Landlock ABI version, or why it offers none.
func Supported() (int, error) {
	return llsys.LandlockGetABIVersion()
}
