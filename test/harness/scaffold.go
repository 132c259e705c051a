package harness

import (
	"context"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// QuietLogs sends the controllers' logs to stderr at the error level only: a suite's TestMain
// calls it first, so that a failing test's output is the test's.
func QuietLogs() {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
}

// CreateNamespaces creates each namespace of names, as CreateNamespace does.
func (e *Env) CreateNamespaces(ctx context.Context, names ...string) error {
	for _, ns := range names {
		if err := e.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// StartManager runs mgr, as a test's own (all reconcilers with the shipped RBAC, say), until
// the test ends; the test fails if the manager stops with an error.
func StartManager(t testing.TB, mgr interface{ Start(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}
