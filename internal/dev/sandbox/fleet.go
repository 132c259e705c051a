package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// FleetOptions configures a local fleet.
type FleetOptions struct {
	// Assets are the binaries and CRDs to run from.
	Assets Assets
	// StateDir holds everything the fleet keeps: etcd's data, certificates, kubeconfigs, ports
	// and logs. A fleet started again on the same directory resumes.
	StateDir string
	// Members names the member clusters started with the hub.
	Members []string
	// Progress receives a line for each step; nil discards them.
	Progress io.Writer
}

// Fleet is a hub cluster and member clusters on loopback, one etcd under them all, and Argo
// CD's application controller and repo server (with redis) on the hub, all real processes.
// Every cluster, the hub too, has a simulated node (NodeName) that KWOK plays and the
// scheduler places Pods on: Deployments roll out on the members, and verification Jobs run on
// the hub, to success, or to failure for JobFailImage.
type Fleet struct {
	// Hub runs Kokumi and Argo CD.
	Hub *Cluster
	// ArgoCDNamespace is the hub namespace Argo CD runs in.
	ArgoCDNamespace string
	// RepoServer is the host:port of argocd-repo-server.
	RepoServer string
	// Redis is the host:port of the redis Argo CD uses.
	Redis string
	// Registry is the host:port of the bundled registry, which Argo CD pulls from over plain
	// HTTP; it signs in the pusher and the puller of RegistryCredentials.
	Registry string

	opts    FleetOptions
	ports   *portBook
	logDir  string
	etcdURL string

	mu       sync.Mutex
	members  map[string]*Cluster
	procs    []*process
	registry *registry.Registry
	hub      client.Client
}

// ArgoCDNamespace is where the fleet runs Argo CD on the hub.
const ArgoCDNamespace = "argocd"

// StartFleet starts etcd, the hub and the members, and Argo CD on the hub; it returns once every
// API server is ready and Argo CD runs. Stop it with Stop, also when StartFleet fails.
func StartFleet(ctx context.Context, o FleetOptions) (*Fleet, error) {
	if err := o.Assets.CheckFleet(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", o.StateDir, err)
	}
	ports, err := loadPortBook(filepath.Join(o.StateDir, "ports.json"))
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		ArgoCDNamespace: ArgoCDNamespace,
		opts:            o,
		ports:           ports,
		logDir:          LogDir(o.StateDir),
		members:         map[string]*Cluster{},
	}
	if err := f.start(ctx); err != nil {
		return f, err
	}
	return f, nil
}

func (f *Fleet) start(ctx context.Context) error {
	start := time.Now()
	if err := f.startEtcd(ctx); err != nil {
		return err
	}
	if err := f.startRedis(ctx); err != nil {
		return err
	}
	if err := f.startRegistry(); err != nil {
		return err
	}
	if err := os.WriteFile(f.jobStagesFile(), jobStages, 0o644); err != nil {
		return fmt.Errorf("write the fleet's KWOK stages: %w", err)
	}
	hub, err := prepareCluster(f.opts.StateDir, "hub", false, f.ports)
	if err != nil {
		return err
	}
	f.Hub = hub
	clusters := []*Cluster{hub}
	for _, name := range f.opts.Members {
		c, err := prepareCluster(f.opts.StateDir, name, true, f.ports)
		if err != nil {
			return err
		}
		f.members[name] = c
		clusters = append(clusters, c)
	}
	fmt.Fprintf(f.opts.Progress, "starting %d kube-apiservers\n", len(clusters))
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Go(func() { errs[i] = c.start(ctx, f) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(f.opts.Progress, "API servers ready after %s; installing the CRDs and Argo CD's settings on the hub\n", time.Since(start).Round(100*time.Millisecond))
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{
		Paths:              []string{f.opts.Assets.KokumiCRDDir, f.opts.Assets.ArgoCDCRDDir},
		ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("install the CRDs on the hub: %w", err)
	}
	if err := hub.startHubControllers(f); err != nil {
		return err
	}
	adminClient, err := f.AdminClient()
	if err != nil {
		return err
	}
	if err := InstallPeopleRBAC(ctx, adminClient, f.opts.Assets.Root); err != nil {
		return err
	}
	if err := f.seedRegistryCredentials(ctx); err != nil {
		return err
	}
	if err := f.configureArgoCD(ctx); err != nil {
		return err
	}
	if err := f.startArgoCD(ctx); err != nil {
		return err
	}
	fmt.Fprintf(f.opts.Progress, "fleet up after %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// jobStagesFile is where the fleet keeps jobStages for its KWOKs.
func (f *Fleet) jobStagesFile() string { return filepath.Join(f.opts.StateDir, "kwok-job-stages.yaml") }

// Members returns the member clusters, by name.
func (f *Fleet) Members() []*Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Cluster, 0, len(f.members))
	for _, c := range f.members {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Member returns the member called name, or nil.
func (f *Fleet) Member(name string) *Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[name]
}

// AddMember starts a new member cluster (or starts a known one again) and returns it.
func (f *Fleet) AddMember(ctx context.Context, name string) (*Cluster, error) {
	f.mu.Lock()
	c, ok := f.members[name]
	f.mu.Unlock()
	if !ok {
		var err error
		if c, err = prepareCluster(f.opts.StateDir, name, true, f.ports); err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.members[name] = c
		f.mu.Unlock()
	}
	if err := c.start(ctx, f); err != nil {
		return nil, err
	}
	return c, nil
}

// StopMember stops every process of a member: its API server no longer answers.
func (f *Fleet) StopMember(name string) error {
	c := f.Member(name)
	if c == nil {
		return fmt.Errorf("no member called %s", name)
	}
	return c.stop()
}

// Pids returns the process ids of every process the fleet runs, by name.
func (f *Fleet) Pids() map[string]int {
	out := map[string]int{}
	add := func(ps []*process) {
		for _, p := range ps {
			if done, _ := p.exited(); !done {
				out[p.name] = p.cmd.Process.Pid
			}
		}
	}
	f.mu.Lock()
	add(f.procs)
	f.mu.Unlock()
	if f.Hub != nil {
		add(f.Hub.processes())
	}
	for _, c := range f.Members() {
		add(c.processes())
	}
	return out
}

// LogDir is where every process of the fleet logs.
func (f *Fleet) LogDir() string { return f.logDir }

// LogDir is where the processes of a fleet on stateDir log, known before it starts.
func LogDir(stateDir string) string { return filepath.Join(stateDir, "logs") }

// Stop stops every process the fleet started: Argo CD, the members, the hub, redis and etcd.
func (f *Fleet) Stop() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	procs := f.procs
	f.procs = nil
	f.mu.Unlock()
	var errs []error
	// Argo CD first (started last), then the clusters, then redis and etcd (started first).
	var tail []*process
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].name == "etcd" || procs[i].name == "redis" {
			tail = append(tail, procs[i])
			continue
		}
		errs = append(errs, procs[i].stop(10*time.Second))
	}
	var wg sync.WaitGroup
	clusters := f.Members()
	if f.Hub != nil {
		clusters = append(clusters, f.Hub)
	}
	stopErrs := make([]error, len(clusters))
	for i, c := range clusters {
		wg.Go(func() { stopErrs[i] = c.stop() })
	}
	wg.Wait()
	errs = append(errs, stopErrs...)
	for _, p := range tail {
		errs = append(errs, p.stop(10*time.Second))
	}
	if f.registry != nil {
		errs = append(errs, f.registry.Stop())
		f.registry = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop the fleet: %w", err)
	}
	return nil
}

func (f *Fleet) track(p *process) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, p)
}

// startEtcd starts the one etcd every API server keeps its data in, under its own prefix.
func (f *Fleet) startEtcd(ctx context.Context) error {
	client, err := f.ports.port("etcd")
	if err != nil {
		return err
	}
	peer, err := f.ports.port("etcd-peer")
	if err != nil {
		return err
	}
	f.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p, err := startProcess(f.logDir, processSpec{
		name: "etcd",
		path: filepath.Join(f.opts.Assets.BinDir, "etcd"),
		args: []string{
			"--name=fleet",
			"--data-dir=" + filepath.Join(f.opts.StateDir, "etcd"),
			"--listen-client-urls=" + f.etcdURL,
			"--advertise-client-urls=" + f.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=fleet=" + peerURL,
			// A local fleet trades durability for speed, as envtest does.
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=4294967296",
			"--log-level=warn",
		},
	})
	if err != nil {
		return err
	}
	f.track(p)
	return poll(ctx, time.Minute, "etcd to be healthy at "+f.etcdURL, func() (bool, error) {
		if done, _ := p.exited(); done {
			return false, p.failure()
		}
		resp, err := http.Get(f.etcdURL + "/health")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// RSS returns the resident memory of every process of the fleet, and of this process (which
// serves the bundled registry and, in `kokumi dev`, runs Kokumi's controller), in bytes.
func (f *Fleet) RSS() (int64, error) {
	pids := []int{os.Getpid()}
	for _, pid := range f.Pids() {
		pids = append(pids, pid)
	}
	var total int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, fmt.Errorf("read the memory of process %d: %w", pid, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
					return 0, fmt.Errorf("parse the memory of process %d: %w", pid, err)
				}
				total += kb * 1024
			}
		}
	}
	return total, nil
}
