package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/admission"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// runAdmission serves Kokumi's admission check of Argo CD Applications (internal/admission)
// on the hub, over HTTPS, for a ValidatingWebhookConfiguration (config/admission).
func runAdmission(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("admission", stderr)
	defaults := config.Default()
	cfg := config.Config{}
	fs.StringVar(&cfg.Namespace, "namespace", defaults.Namespace, "Kokumi's own namespace: the ConfigMap "+record.ConfigMapName+" lists the public keys, and the bundled registry's puller Secret is there")
	fs.StringVar(&cfg.BundledRegistry, "bundled-registry", defaults.BundledRegistry, "host:port of the bundled registry, where the records are")
	host := fs.String("host", "", "address to listen on (default: all)")
	port := fs.Int("port", 9443, "port to listen on")
	certDir := fs.String("cert-dir", "/etc/kokumi-admission/certs", "directory of the serving certificate "+admission.CertFile+" and its key "+admission.KeyFile+" (read again when they change)")
	generate := fs.String("generate-cert", "", "comma-separated hosts (DNS names or IPs): write a self-signed certificate for them into --cert-dir first, with "+admission.CAFile+" for the caBundle (for trials; an install uses a certificate its admin issues)")
	exempt := fs.String("exempt-repositories", "", "comma-separated repository URL prefixes (such as https://git.example.com/platform/) whose sources may deploy to a Cluster of an Environment requiring verified records without being a Preparation's artifact: the admins' own add-ons; default: none")
	publicKeys := fs.String("public-keys", "", "a PEM file of the public keys that verify records (kokumi public-key --all); default: the ConfigMap "+record.ConfigMapName)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("admission takes no arguments, got %q", fs.Args())
	}
	ctrl.SetLogger(zap.New())
	if *generate != "" {
		if _, err := admission.GenerateCert(*certDir, strings.Split(*generate, ",")...); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote a self-signed certificate for %s; its caBundle is %s\n", *generate, filepath.Join(*certDir, admission.CAFile))
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	c, err := client.New(restCfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("create a client: %w", err)
	}
	var keys stages.TrustedKeySource = &record.Keys{Client: c, Namespace: cfg.Namespace}
	if *publicKeys != "" {
		data, err := os.ReadFile(*publicKeys)
		if err != nil {
			return fmt.Errorf("read --public-keys: %w", err)
		}
		parsed, err := record.ParseTrustedKeys(data)
		if err != nil {
			return fmt.Errorf("--public-keys %s: %w", *publicKeys, err)
		}
		keys = admission.PublicKeys(parsed)
	}
	check := &admission.Check{Client: c, Records: &stages.Pipeline{
		Client: c, Records: &record.Store{Client: bundled.Puller(c, cfg)}, Keys: keys, BundledRegistry: cfg.BundledRegistry,
	}}
	for _, p := range strings.Split(*exempt, ",") {
		if p = strings.TrimSpace(p); p != "" {
			check.Exempt = append(check.Exempt, p)
		}
	}
	return admission.Serve(ctx, *host, *port, *certDir, check)
}
