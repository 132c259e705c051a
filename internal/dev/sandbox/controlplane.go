package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControlPlane is a real kube-apiserver and etcd with Kokumi's and Argo CD's CRDs installed.
type ControlPlane struct {
	env         *envtest.Environment
	controllers *process
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
}

// StartControlPlane starts etcd and kube-apiserver from the assets and installs the CRDs of
// the directories a names (Argo CD's are left out when a.ArgoCDCRDDir is empty).
func StartControlPlane(a Assets) (*ControlPlane, error) {
	var crds []string
	for _, dir := range []string{a.KokumiCRDDir, a.ArgoCDCRDDir} {
		if dir != "" { // an empty directory is left out: Argo CD may come later
			crds = append(crds, dir)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: a.BinDir,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", a.BinDir, err)
	}
	return &ControlPlane{env: env, Config: cfg}, nil
}

// Server is the API server's URL, without the trailing slash envtest leaves on it.
func (c *ControlPlane) Server() string { return strings.TrimSuffix(c.Config.Host, "/") }

// StartControllers runs kube-controller-manager against the control plane with the given
// controllers (by default the hub's, HubControllers), as a cluster admin, logging into dir.
// Stop stops it first. It runs once per control plane.
func (c *ControlPlane) StartControllers(a Assets, dir string, controllers ...string) error {
	if c.controllers != nil {
		return fmt.Errorf("kube-controller-manager already runs against %s", c.Server())
	}
	if err := a.CheckControllerManager(); err != nil {
		return err
	}
	if len(controllers) == 0 {
		controllers = HubControllers
	}
	kubeconfig := filepath.Join(dir, "controller-manager.kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	p, err := startProcess(dir, controllerManager("test", a.ControllerManager(), kubeconfig, controllers))
	if err != nil {
		return err
	}
	c.controllers = p
	return nil
}

// Stop stops the controllers, the API server and etcd, and removes their data.
func (c *ControlPlane) Stop() error {
	if c.controllers != nil {
		if err := c.controllers.stop(10 * time.Second); err != nil {
			return err
		}
	}
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for a cluster admin to path and returns it.
func (c *ControlPlane) WriteKubeconfig(path string) error {
	user, err := c.env.AddUser(envtest.User{Name: "kokumi-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// AddUser returns a client config for a user of the given groups, authenticated by a client
// certificate the API server trusts.
func (c *ControlPlane) AddUser(name string, groups ...string) (*rest.Config, error) {
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", name, err)
	}
	return user.Config(), nil
}
