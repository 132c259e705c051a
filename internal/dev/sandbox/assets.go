// Package sandbox runs Kokumi's local control planes: the API servers, etcd and Argo CD's CRDs
// the tests and `kokumi dev` use, from binaries `make test-assets` builds into bin/.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModulePath is the Go module path the repository root is found by.
const ModulePath = "github.com/kokumi-dev/kokumi"

// Assets locates the control-plane binaries and the CRDs of a checkout.
type Assets struct {
	// Root is the repository root.
	Root string
	// BinDir holds kube-apiserver, etcd, kubectl and kube-controller-manager.
	BinDir string
	// ArgoCDCRDDir holds Argo CD's Application and AppProject CRDs.
	ArgoCDCRDDir string
	// KokumiCRDDir holds Kokumi's generated CRDs.
	KokumiCRDDir string
	// FleetDir holds what the local fleet runs beside the API servers and
	// kube-controller-manager: kube-scheduler, kwok and its stages, and Argo CD's multicall
	// binary (`make fleet-assets`).
	FleetDir string
}

// FindRoot walks up from dir to the directory whose go.mod declares Kokumi's module.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.TrimSpace(firstModuleLine(string(data))) == "module "+ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod of " + ModulePath + " above the working directory")
		}
		dir = parent
	}
}

func firstModuleLine(gomod string) string {
	for _, line := range strings.Split(gomod, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "module ") {
			return line
		}
	}
	return ""
}

// FindAssets locates the assets of the checkout that holds the working directory. The binaries
// come from $KUBEBUILDER_ASSETS when set, else from bin/envtest, which `make test-assets` fills.
func FindAssets() (Assets, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Assets{}, fmt.Errorf("find assets: %w", err)
	}
	root, err := FindRoot(wd)
	if err != nil {
		return Assets{}, err
	}
	a := Assets{
		Root:         root,
		BinDir:       filepath.Join(root, "bin", "envtest"),
		ArgoCDCRDDir: filepath.Join(root, "bin", "envtest", "crds"),
		KokumiCRDDir: filepath.Join(root, "config", "crd", "bases"),
		FleetDir:     filepath.Join(root, "bin", "fleet"),
	}
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		a.BinDir = dir
	}
	return a, a.Check()
}

// Check reports the first missing asset, and how to build it.
func (a Assets) Check() error {
	for _, p := range []string{
		filepath.Join(a.BinDir, "kube-apiserver"),
		filepath.Join(a.BinDir, "etcd"),
		filepath.Join(a.BinDir, "kubectl"),
		filepath.Join(a.ArgoCDCRDDir, "application-crd.yaml"),
		filepath.Join(a.ArgoCDCRDDir, "appproject-crd.yaml"),
	} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("control-plane asset %s is missing: run `make test-assets` (it builds them once into bin/): %w", p, err)
		}
	}
	if _, err := os.Stat(a.KokumiCRDDir); err != nil {
		return fmt.Errorf("the Kokumi CRDs are missing in %s: run `make manifests`: %w", a.KokumiCRDDir, err)
	}
	return nil
}

// CheckFleet reports the first missing asset of the local fleet, and how to build it.
func (a Assets) CheckFleet() error {
	if err := a.CheckControllerManager(); err != nil {
		return err
	}
	for _, name := range []string{"kube-scheduler", "kwok", "kwok-stages.yaml", "argocd"} {
		p := filepath.Join(a.FleetDir, name)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("fleet asset %s is missing: run `make fleet-assets` (it builds them once into bin/): %w", p, err)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server is missing (Argo CD needs it): apt-get install -y redis-server: %w", err)
	}
	return nil
}

// CheckControllerManager reports a missing kube-controller-manager, which every cluster of the
// fleet runs and the tests that need a cluster's controllers start, and how to build it.
func (a Assets) CheckControllerManager() error {
	if _, err := os.Stat(a.ControllerManager()); err != nil {
		return fmt.Errorf("control-plane asset %s is missing: run `make test-assets` (it builds it once into bin/): %w", a.ControllerManager(), err)
	}
	return nil
}

// Versions reads the pinned versions `make` recorded beside the binaries (kubernetes, etcd,
// argocd, kwok).
func (a Assets) Versions() map[string]string {
	v := map[string]string{}
	for _, f := range []string{filepath.Join(a.BinDir, "versions"), filepath.Join(a.FleetDir, "versions")} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if k, val, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
				v[k] = val
			}
		}
	}
	return v
}

// Kubectl is the path of the built kubectl.
func (a Assets) Kubectl() string { return filepath.Join(a.BinDir, "kubectl") }

// ControllerManager is the path of the built kube-controller-manager.
func (a Assets) ControllerManager() string { return filepath.Join(a.BinDir, "kube-controller-manager") }

// Cosign is the path of stock cosign, which `make test-assets` builds beside kubectl.
func (a Assets) Cosign() string { return filepath.Join(a.BinDir, "cosign") }
