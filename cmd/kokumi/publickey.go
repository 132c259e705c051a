package main

import (
	"context"
	"fmt"
	"io"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// runPublicKey prints the public key that verifies Kokumi's deployment records, read from the
// ConfigMap in Kokumi's namespace with the usual kubeconfig: `kokumi public-key > kokumi.pub`.
func runPublicKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("public-key", stderr)
	namespace := fs.String("namespace", config.Default().Namespace, "Kokumi's own namespace, where the ConfigMap "+record.ConfigMapName+" lists the keys")
	all := fs.Bool("all", false, "print every listed key (the current one and previous ones), each after a \"# <keyid>\" line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("public-key takes no arguments, got %q", fs.Args())
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("create a client: %w", err)
	}
	keys, found, err := server.ReadPublicKeys(ctx, c, *namespace)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("no ConfigMap %s in namespace %s: Kokumi creates it when the controller first starts (is it running, with --namespace=%s?)",
			record.ConfigMapName, *namespace, *namespace)
	case *all && len(keys.Keys) == 0:
		return fmt.Errorf("ConfigMap %s/%s lists no <keyid>.pub entry", *namespace, record.ConfigMapName)
	case !*all && keys.Current == "":
		return fmt.Errorf("ConfigMap %s/%s has no %s entry: Kokumi writes it when the controller starts", *namespace, record.ConfigMapName, record.CurrentKeyEntry)
	}
	if err := keys.WritePEM(stdout, *all); err != nil {
		return fmt.Errorf("write the public key: %w", err)
	}
	return nil
}
