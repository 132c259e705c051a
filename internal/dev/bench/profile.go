package bench

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profileSeconds is how long each of the controller's CPU profiles over a phase lasts.
const profileSeconds = 5

// profileController takes, with ProfileDir, one CPU profile of the controller of profileSeconds
// after the other into ProfileDir until the returned func is called (the profile then under way
// is finished and kept), and returns at once. Without ProfileDir it does nothing.
func (r *run) profileController(phase string) (done func()) {
	if r.opts.ProfileDir == "" || r.pprofAddr == "" {
		return func() {}
	}
	stop, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			path := filepath.Join(r.opts.ProfileDir, fmt.Sprintf("controller-%s-%d-%d.pprof", phase, r.opts.N, i))
			if err := r.fetchProfile(fmt.Sprintf("profile?seconds=%d", profileSeconds), path); err != nil {
				r.logf("no CPU profile of the controller during %s: %v", phase, err)
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	return func() {
		close(stop)
		<-finished
	}
}

// heapProfile writes, with ProfileDir, the controller's heap profile into it.
func (r *run) heapProfile() {
	if r.opts.ProfileDir == "" || r.pprofAddr == "" {
		return
	}
	if err := r.fetchProfile("heap", filepath.Join(r.opts.ProfileDir, fmt.Sprintf("controller-heap-%d.pprof", r.opts.N))); err != nil {
		r.logf("no heap profile of the controller: %v", err)
	}
}

// fetchProfile saves what the controller's /debug/pprof/<what> answers into path.
func (r *run) fetchProfile(what, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + r.pprofAddr + "/debug/pprof/" + what)
	if err != nil {
		return fmt.Errorf("get /debug/pprof/%s: %w", what, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get /debug/pprof/%s: %s", what, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read /debug/pprof/%s: %w", what, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
