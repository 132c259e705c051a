package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
)

// portBook gives each part of the fleet a loopback port and keeps it in the state directory,
// so that a restarted fleet listens where the first one did: the servers recorded in Clusters,
// kubeconfigs and Argo CD's cluster Secrets stay true.
type portBook struct {
	mu    sync.Mutex
	path  string
	Ports map[string]int `json:"ports"`
}

func loadPortBook(path string) (*portBook, error) {
	b := &portBook{path: path, Ports: map[string]int{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if b.Ports == nil {
		b.Ports = map[string]int{}
	}
	return b, nil
}

// port returns the port kept for name, or picks a free one and keeps it.
func (b *portBook) port(name string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.Ports[name]; ok {
		return p, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port for %s: %w", name, err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	b.Ports[name] = p
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return 0, fmt.Errorf("encode ports: %w", err)
	}
	if err := os.WriteFile(b.path, data, 0o644); err != nil {
		return 0, fmt.Errorf("write %s: %w", b.path, err)
	}
	return p, nil
}

// addr returns 127.0.0.1:<port of name>.
func (b *portBook) addr(name string) (string, error) {
	p, err := b.port(name)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}
