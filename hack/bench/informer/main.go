// Command informer is the bench's bare client's informer (hack/bench --bare-informer): in a
// process of its own, it keeps a cache of the Argo CD Applications of one namespace through a
// controller-runtime informer, as a controller keeps one of what it writes, and prints
// "synced" once the cache has listed them and watches. It runs until it is signalled.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the identity to watch as")
	namespace := flag.String("namespace", "", "the namespace whose Applications to watch")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string) error {
	if kubeconfig == "" || namespace == "" {
		return fmt.Errorf("--kubeconfig and --namespace are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", kubeconfig, err)
	}
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	c, err := cache.New(cfg, cache.Options{
		Scheme:            runtime.NewScheme(),
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("create the cache: %w", err)
	}
	if _, err := c.GetInformer(ctx, client.Object(app)); err != nil {
		return fmt.Errorf("the informer of Applications: %w", err)
	}
	errs := make(chan error, 1)
	go func() { errs <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the cache of Applications in %s did not sync", namespace)
	}
	fmt.Println("synced")
	if err := <-errs; err != nil {
		return fmt.Errorf("the cache stopped: %w", err)
	}
	return nil
}
