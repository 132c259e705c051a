// Package scheme is the runtime scheme Kokumi's binaries share: the built-in kinds, Kokumi's
// delivery kinds, and Argo CD's Application as Kokumi reads it.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// New returns a scheme with the built-in kinds, Kokumi's, and Argo CD's Application as
// Kokumi reads it (argocd.Application).
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register built-in kinds: %w", err)
	}
	if err := argocd.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add Argo CD's Application to scheme: %w", err)
	}
	if err := v1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register Kokumi kinds: %w", err)
	}
	return s, nil
}
