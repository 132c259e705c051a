package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// serverSetup adds the API and UI server to a manager, reading through its cache, with
// Kokumi's configuration (--namespace, --argocd-namespace, --bundled-registry).
func serverSetup(o server.Options) controller.Setup {
	return func(mgr ctrl.Manager, shared controller.Shared) error {
		c := shared.Config
		o.ArgoCDNamespace = c.ArgoCDNamespace
		o.Namespace = c.Namespace
		o.BundledRegistry = c.BundledRegistry
		return server.AddToManager(mgr, shared.ArgoCD, o, nil)
	}
}

// readAdminToken reads the opt-in admin token from a file, or from KOKUMI_TOKEN when no file is
// given; "" (no admin token: only Kubernetes identities sign in) when neither is set.
func readAdminToken(path string) (string, error) {
	if path == "" {
		return strings.TrimSpace(os.Getenv("KOKUMI_TOKEN")), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read --admin-token-file: %w", err)
	}
	t := strings.TrimSpace(string(data))
	if t == "" {
		return "", fmt.Errorf("--admin-token-file %s is empty: write a long random token into it, or drop the flag", path)
	}
	return t, nil
}

// optionalBool is a boolean flag that knows whether it was set.
type optionalBool struct{ value *bool }

func (b *optionalBool) String() string {
	if b == nil || b.value == nil {
		return ""
	}
	return strconv.FormatBool(*b.value)
}

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("not a boolean: %w", err)
	}
	b.value = &v
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (b *optionalBool) IsBoolFlag() bool { return true }

func runServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("server", stderr)
	var o server.Options
	var mgrOpts controller.Options
	fs.StringVar(&o.Addr, "bind-address", ":8090", "address the API and UI listen on")
	tokenFile := fs.String("admin-token-file", "", "opt in to an admin token (for a demo): the file holding it; whoever holds it acts with the server's own ServiceAccount (default: the KOKUMI_TOKEN environment variable, else none: only Kubernetes identities sign in)")
	var secure optionalBool
	fs.Var(&secure, "secure-cookies", "mark the session cookie Secure, as behind a TLS-terminating proxy (default: on unless --bind-address is a loopback address; always on with --tls-cert-file)")
	fs.DurationVar(&o.SessionTTL, "session-ttl", 12*time.Hour, "how long a login lasts")
	fs.StringVar(&o.ArgoCDURL, "argocd-url", "", "base address of Argo CD's UI, such as https://argocd.example.com; Application rows link there")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serve HTTPS with this certificate (with --tls-key-file)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "key of --tls-cert-file")
	listFlag(fs, "allowed-hosts", "comma-separated names the server answers in a request's Host header besides localhost, IP addresses, the --bind-address host and the Service kokumi-server's in-cluster names, such as an ingress's kokumi.example.com; *.example.com allows its subdomains, * any name", &o.AllowedHosts, nil)
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", server.DefaultReadHeaderTimeout, "how long a client may take to send a request's headers (negative: no limit)")
	fs.DurationVar(&o.ReadTimeout, "read-timeout", server.DefaultReadTimeout, "how long a client may take to send a whole request (negative: no limit)")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", server.DefaultWriteTimeout, "how long the server may take to answer a request; an event stream gets it again for each event (negative: no limit)")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "how long a kept-alive connection may wait for its next request (negative: no limit)")
	fs.IntVar(&o.MaxStreamsPerSession, "max-streams-per-session", server.DefaultMaxStreamsPerSession, "event streams a session (or a bearer token) may keep open")
	fs.IntVar(&o.MaxStreamsPerIdentity, "max-streams-per-identity", server.DefaultMaxStreamsPerIdentity, "event streams one identity may keep open across its sessions and bearer tokens")
	fs.IntVar(&o.MaxStreams, "max-streams", server.DefaultMaxStreams, "event streams the server keeps open in all")
	fs.IntVar(&o.MaxSessions, "max-sessions", server.DefaultMaxSessions, "sessions the server keeps in all; when full, a new login is refused (503) and nobody is logged out")
	fs.IntVar(&o.MaxSessionsPerIdentity, "max-sessions-per-identity", server.DefaultMaxSessionsPerIdentity, "sessions one identity keeps; its next login ends its own oldest")
	fs.DurationVar(&o.Revalidate, "session-revalidate", server.DefaultRevalidate, "how often a session's token is checked again with a TokenReview: a revoked or deleted identity is signed out within this time")
	fs.IntVar(&o.FailedLoginBurst, "failed-login-burst", server.DefaultFailedLoginBurst, "failed sign-ins with one token from a client address at once before it is answered 429 (an address gets 10 times as many across tokens); a token the cluster accepted is never throttled")
	fs.DurationVar(&o.FailedLoginInterval, "failed-login-interval", server.DefaultFailedLoginInterval, "how often a throttled client address gets one more sign-in")
	listFlag(fs, "trusted-proxies", "comma-separated addresses and CIDR prefixes of the proxies in front of the server, such as the ingress controller's Pods (10.0.0.0/8): for their requests the client is the last X-Forwarded-For address that is not a trusted proxy; default: none, the client is the connection's peer", &o.TrustedProxies, func(list []string) error {
		_, err := server.ParseTrustedProxies(list)
		return err
	})
	fs.StringVar(&mgrOpts.MetricsAddr, "metrics-bind-address", "0", `address of the metrics endpoint ("0" turns it off)`)
	fs.StringVar(&mgrOpts.ProbeAddr, "health-probe-bind-address", ":8091", "address of the /healthz and /readyz endpoints")
	bindConfigFlags(fs, &mgrOpts.Config)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("set both --tls-cert-file and --tls-key-file, or neither")
	}
	token, err := readAdminToken(*tokenFile)
	if err != nil {
		return err
	}
	o.AdminToken, o.SecureCookies = token, secure.value
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := controller.NewManager(cfg, mgrOpts, serverSetup(o))
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting the API and UI server", "address", o.Addr, "adminToken", o.AdminToken != "")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run the server: %w", err)
	}
	return nil
}
