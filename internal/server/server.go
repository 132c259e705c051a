// Package server is Kokumi's API and UI: a small REST API over Servings, Clusters,
// Environments, Products and Orders, server-sent events that tell the UI what changed, a login
// with Kubernetes identities, and the web UI embedded in the binary.
//
// A person signs in with a token the API server accepts (a ServiceAccount token, an OIDC
// id-token), checked with a TokenReview. The server reads through the manager's cache, so a page
// costs no request to the API server (but for the public keys of deployment records, which it
// may only get), and shows only what RBAC lets that person list or get, asked with
// SubjectAccessReviews and cached briefly; it writes (new Orders, promotions) with the person's
// own token, so the API server's RBAC decides. An opt-in admin token (the demo's) acts with the
// server's own ServiceAccount and is asked nothing.
package server

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// The server reads what the UI shows; the opt-in admin token creates Orders with the server's
// own ServiceAccount (people do it as themselves, authz.go); promotion.go adds the patch of
// Servings, publickeys.go the read of the public keys in Kokumi's namespace, auth.go and authz.go
// what checks tokens and asks RBAC.
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings;clusters;environments;products;orders;preparations,verbs=get;list;watch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders,verbs=create
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=applications,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,resourceNames=kokumi-registry-puller,verbs=get

//go:embed ui
var uiFiles embed.FS

// maxBody caps a request body.
const maxBody = 1 << 20

// Options configures the server.
type Options struct {
	// Addr is the address to listen on, such as ":8090".
	Addr string
	// AdminToken is the opt-in admin token (the demo's): logging in with it, or sending it as a
	// bearer token, allows everything the API offers, done with the server's own
	// ServiceAccount. Empty (the default) signs in Kubernetes identities only.
	AdminToken string
	// SessionTTL is how long a login lasts.
	SessionTTL time.Duration
	// ArgoCDNamespace is where Kokumi's Applications live.
	ArgoCDNamespace string
	// ArgoCDURL is the base address of Argo CD's UI; when set, every Application row links
	// there.
	ArgoCDURL string
	// TLSCertFile and TLSKeyFile serve HTTPS when both are set.
	TLSCertFile, TLSKeyFile string
	// SecureCookies marks the session cookie Secure, as it must be behind a TLS-terminating
	// proxy; nil means on unless Addr is a loopback address. Serving TLS always marks it.
	SecureCookies *bool
	// Namespace is Kokumi's own namespace, where the public keys of deployment records are
	// listed; empty means controller.DefaultConfig's.
	Namespace string
	// BundledRegistry is the host:port of the bundled registry, reached over plain HTTP to
	// read deployment records; empty means controller.DefaultConfig's.
	BundledRegistry string

	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout bound how long a connection
	// may take to send a request's headers, to send the whole request, to be answered (an
	// event stream gets WriteTimeout again for each event) and to wait idle for its next
	// request; zero means the Default… constant of each, a negative value no limit.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// AllowedHosts are the names, besides the listen address's host, localhost, IP addresses
	// and the in-cluster names of the Service kokumi-server, that the server answers in a
	// request's Host header; "*.example.com" allows its subdomains, "*" any name. Other
	// names are refused with 421, as a page that rebinds its own name to the server's address
	// (DNS rebinding) sends.
	AllowedHosts []string
	// MaxStreamsPerSession caps the event streams a session (or a bearer token) keeps open,
	// MaxStreamsPerIdentity those of one identity across its sessions, MaxStreams those of
	// everyone; zero means the Default… constants.
	MaxStreamsPerSession, MaxStreamsPerIdentity, MaxStreams int
	// FailedLoginBurst and FailedLoginInterval throttle failed sign-ins per client address: a
	// client may fail FailedLoginBurst times at once, then once per FailedLoginInterval, and
	// is answered 429 in between; zero means the Default… constants.
	FailedLoginBurst    int
	FailedLoginInterval time.Duration
	// MaxSessions caps the sessions kept in all (a full table refuses new logins, never ends
	// a session), MaxSessionsPerIdentity those of one identity (its new login ends its own
	// oldest); zero means the Default… constants.
	MaxSessions, MaxSessionsPerIdentity int
	// Revalidate is how often a session's token is reviewed again (TokenReview); zero means
	// DefaultRevalidate.
	Revalidate time.Duration
	// TrustedProxies are the addresses and CIDR prefixes of the proxies in front of the server
	// (such as an ingress controller's Pods): for a request from one of them, the client is the
	// last address of X-Forwarded-For that is not a trusted proxy. Empty trusts none: the
	// client is the connection's peer.
	TrustedProxies []string
	// Log is where the server logs failed sign-ins and refused requests; the zero Logger means
	// controller-runtime's.
	Log logr.Logger
}

// timeout is d, or def when d is zero, or no limit (zero) when d is negative.
func timeout(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Server serves the API and the UI.
type Server struct {
	opts Options
	// config reaches the API server as the server's ServiceAccount; clientFor acts for people
	// with copies of it that carry their own token instead.
	config *rest.Config
	client client.Client
	// reader reads without a cache what the server may only get: the public keys.
	reader    client.Reader
	informers cache.Informers
	auth      *auth
	authz     *authorizer
	broker    *broker
	// secureCookies marks the session cookie Secure.
	secureCookies bool
	// pipeline decides promotions as the Serving reconciler does; its view.Records and Keys read
	// the deployment records the Serving page shows.
	pipeline *stages.Pipeline
	records  *ttlCache[string, recordEntry]
	// puller reads the artifacts of Preparations, as the bundled registry's puller.
	puller *oci.Client
	// argo reads Argo CD's Applications; nil reads them through client.
	argo *argocache.Cache
	// limiter throttles failed sign-ins per client address; hosts decides which Host headers
	// are served.
	limiter *limiter
	// addresses throttles the failed sign-ins of a client address whatever the token, logins
	// the sign-ins of each identity; trusted are the proxies whose X-Forwarded-For is believed.
	addresses, logins *limiter
	trusted           []netip.Prefix
	hosts             *hostMatcher
	log               logr.Logger
}

// New returns a server that reads through c, checks tokens and asks RBAC with c, reads the
// public keys through reader, watches through informers, and writes as the signed-in person with
// clients made from cfg that carry the person's own token (or through c for the admin token):
// usually a manager's config, client, API reader and cache.
func New(cfg *rest.Config, c client.Client, reader client.Reader, informers cache.Informers, o Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("the server needs a rest config to act as the people who sign in")
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.ArgoCDNamespace == "" {
		o.ArgoCDNamespace = argocd.DefaultNamespace
	}
	d := config.Default()
	if o.Namespace == "" {
		o.Namespace = d.Namespace
	}
	if o.BundledRegistry == "" {
		o.BundledRegistry = d.BundledRegistry
	}
	o.ReadHeaderTimeout = timeout(o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	o.ReadTimeout = timeout(o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = timeout(o.WriteTimeout, DefaultWriteTimeout)
	o.IdleTimeout = timeout(o.IdleTimeout, DefaultIdleTimeout)
	config.OrDefault(&o.MaxStreamsPerSession, DefaultMaxStreamsPerSession)
	config.OrDefault(&o.MaxStreamsPerIdentity, DefaultMaxStreamsPerIdentity)
	config.OrDefault(&o.MaxStreams, DefaultMaxStreams)
	config.OrDefault(&o.FailedLoginBurst, DefaultFailedLoginBurst)
	config.OrDefault(&o.FailedLoginInterval, DefaultFailedLoginInterval)
	config.OrDefault(&o.MaxSessions, DefaultMaxSessions)
	config.OrDefault(&o.MaxSessionsPerIdentity, DefaultMaxSessionsPerIdentity)
	config.OrDefault(&o.Revalidate, DefaultRevalidate)
	trusted, err := ParseTrustedProxies(o.TrustedProxies)
	if err != nil {
		return nil, err
	}
	kokumi := config.Config{Namespace: o.Namespace, ArgoCDNamespace: o.ArgoCDNamespace, BundledRegistry: o.BundledRegistry}
	p := stages.NewPipeline(c, reader, kokumi)
	// The keys are read without the cache, which would list and watch every ConfigMap of the
	// cluster: the server may only get the one in Kokumi's namespace.
	p.Keys = &trustedKeys{source: &record.Keys{Client: uncached{Client: c, reader: reader}, Namespace: o.Namespace}}
	// Records and artifacts are read as the bundled registry's puller, Kokumi's read-only
	// identity of every namespace (Secret kokumi-registry-puller; never given to Argo CD).
	puller := bundled.Puller(reader, kokumi)
	p.Records = &record.Store{Client: puller}
	return &Server{
		opts: o, config: cfg, client: c, reader: reader, informers: informers,
		auth: newAuth(o.AdminToken, c, o.SessionTTL, o.MaxSessions, o.MaxSessionsPerIdentity, o.Revalidate), authz: newAuthorizer(c), broker: newBroker(),
		secureCookies: o.secureCookies(), pipeline: p, puller: puller, records: newTTLCache[string, recordEntry](maxCachedArtifacts),
		limiter:   newLimiter(o.FailedLoginBurst, o.FailedLoginInterval, maxThrottledClients),
		addresses: newLimiter(addressBurstFactor*o.FailedLoginBurst, o.FailedLoginInterval/addressBurstFactor, maxThrottledClients),
		logins:    newLimiter(DefaultLoginBurst, DefaultLoginInterval, maxThrottledClients),
		trusted:   trusted,
		hosts:     newHostMatcher(o.AllowedHosts, o.Addr, o.Namespace), log: loggerOf(o.Log),
	}, nil
}

// Handler returns the server's routes, behind the protections every request gets (hardened).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	req := s.require
	mux.HandleFunc("POST /api/v1/login", s.login)
	mux.HandleFunc("POST /api/v1/logout", s.logout)
	mux.HandleFunc("GET /api/v1/me", s.me)
	mux.HandleFunc("GET /api/v1/servings", req(s.listServings))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/servings/{name}", req(s.getServing))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/servings/{name}/plan", req(s.plan))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/promotion", req(s.promote))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/rollback", req(s.rollback))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/pause", req(s.pauseRollout))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/resume", req(s.resumeRollout))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/abort", req(s.abortRollout))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/approve", req(s.approve))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/preparations/{name}/manifests", req(s.preparationManifests))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/preparations/{name}/diff", req(s.preparationDiff))
	mux.HandleFunc("GET /api/v1/clusters", req(s.listClusters))
	mux.HandleFunc("GET /api/v1/clusters/{name}", req(s.getCluster))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/environments", req(s.listEnvironments))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/environments/{name}/fleet", req(s.getFleet))
	mux.HandleFunc("GET /api/v1/fleet", req(s.listFleet))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/products", req(s.listProducts))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/orders", req(s.createOrder))
	mux.HandleFunc("GET /api/v1/orders", req(s.listOrders))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/orders/{name}", req(s.getOrder))
	mux.HandleFunc("GET /api/v1/order-namespaces", req(s.orderNamespaces))
	mux.HandleFunc("GET /api/v1/public-keys", req(s.publicKeys))
	mux.HandleFunc("GET /api/v1/events", req(s.events))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "no such API route")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	ui, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.FileServerFS(ui)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "the UI's files are read with GET")
			return
		}
		files.ServeHTTP(w, r)
	})
	return s.hardened(mux)
}

// AddToManager runs a server in mgr, reading through the manager's client, reading the public
// keys through its API reader, watching through its cache, reading Argo CD's Applications from
// argo (the manager's one cache of Argo CD's namespace, of every shard: the pages show every
// Serving, whichever replica deploys it) and acting as people with its config:
// on ln, or on o.Addr when ln is nil. With ln and no o.Addr, ln's address decides whether the
// session cookie is Secure by default.
func AddToManager(mgr manager.Manager, argo *argocache.Cache, o Options, ln net.Listener) error {
	if ln != nil && o.Addr == "" {
		o.Addr = ln.Addr().String()
	}
	s, err := New(mgr.GetConfig(), mgr.GetClient(), mgr.GetAPIReader(), mgr.GetCache(), o)
	if err != nil {
		return err
	}
	// Argo CD's Applications come from a cache of Argo CD's namespace, watched from when Argo
	// CD's CRDs are served: the server starts before Argo CD is installed.
	s.argo = argo
	argo.OnInstalled(func(ctx context.Context) error {
		return s.publishChanges(ctx, argo.Cache, "Application", &argocd.Application{})
	})
	var r manager.Runnable = s
	if ln != nil {
		r = manager.RunnableFunc(func(ctx context.Context) error { return s.Serve(ctx, ln) })
	}
	if err := mgr.Add(r); err != nil {
		return fmt.Errorf("add the server to the manager: %w", err)
	}
	return nil
}

// Serve watches the cache for changes and serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.watch(ctx, s.informers); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	var err error
	if s.opts.TLSCertFile != "" && s.opts.TLSKeyFile != "" {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		err = srv.ServeTLS(ln, s.opts.TLSCertFile, s.opts.TLSKeyFile)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}

// Start listens on the configured address and serves until ctx ends; it makes the server a
// manager Runnable.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Addr, err)
	}
	logf.FromContext(ctx).Info("serving the API and UI", "address", ln.Addr().String())
	return s.Serve(ctx, ln)
}

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// listServings lists the Servings of the namespaces the person may list Servings in (of one,
// with ?namespace=, which they must be allowed to list).
func (s *Server) listServings(w http.ResponseWriter, r *http.Request) {
	var list v1.ServingList
	var opts []client.ListOption
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		if !s.authorize(w, r, access{verb: "list", group: deliveryGroup, resource: "servings", namespace: ns}) {
			return
		}
		opts = append(opts, client.InNamespace(ns))
	}
	if err := s.client.List(r.Context(), &list, opts...); err != nil {
		writeAPIError(w, "list Servings", err)
		return
	}
	items, err := keepListable(s, r.Context(), deliveryGroup, "servings", list.Items, func(sv *v1.Serving) string { return sv.Namespace })
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := make([]view.ServingSummary, 0, len(items))
	for i := range items {
		out = append(out, view.SummarizeServing(&items[i]))
	}
	writeTable(w, out, func(a, b view.ServingSummary) bool {
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// getServing answers the Serving page to a person who may get the Serving, with the rows of
// its table that ?q=, ?state=, ?offset= and ?limit= ask for (view.RowQuery); its Order's promotion,
// pipeline and deployment records only when they may also get Orders and list Preparations
// there.
func (s *Server) getServing(w http.ResponseWriter, r *http.Request) {
	var sv v1.Serving
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "servings", namespace: key.Namespace, name: key.Name}) {
		return
	}
	q, err := view.RowQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.client.Get(r.Context(), key, &sv); err != nil {
		writeAPIError(w, "get Serving "+key.String(), err)
		return
	}
	apps, err := s.applications(r.Context(), client.MatchingLabels{
		argocd.LabelServing: sv.Name, argocd.LabelServingNamespace: sv.Namespace,
	})
	if err != nil {
		writeAPIError(w, "list the Serving's Applications", err)
		return
	}
	d := view.ServingDetailPage(&sv, apps, s.opts.ArgoCDURL, q)
	promote, err := s.can(r.Context(), access{verb: "patch", group: deliveryGroup, resource: "servings", namespace: sv.Namespace, name: sv.Name})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	d.Can = map[string]view.Can{"promote": promote, "rollout": promote}
	approval, approve, err := s.approvalOf(r.Context(), &sv)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if approval != nil {
		d.Approval, d.Can["approve"] = approval, approve
	}
	readsOrder, err := s.may(r.Context(),
		access{verb: "get", group: deliveryGroup, resource: "orders", namespace: sv.Namespace, name: sv.Spec.OrderRef.Name},
		access{verb: "list", group: deliveryGroup, resource: "preparations", namespace: sv.Namespace})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !readsOrder {
		writeJSON(w, http.StatusOK, d)
		return
	}
	order, err := s.orderOf(r.Context(), &sv)
	if err != nil {
		writeAPIError(w, "get the Serving's Order", err)
		return
	}
	preps, err := s.preparationsOf(r.Context(), &sv)
	if err != nil {
		writeAPIError(w, "list the Order's Preparations", err)
		return
	}
	d.Promotion = promotionOf(&sv, order, preps)
	d.Pipeline = s.pipelineOf(r.Context(), &sv, order, preps)
	blockPromotion(d.Promotion, d.Pipeline)
	d.Records = s.recordsOf(r.Context(), &sv, preps)
	writeJSON(w, http.StatusOK, d)
}

// listClusters lists the Clusters to a person who may list them.
func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, access{verb: "list", group: deliveryGroup, resource: "clusters"}) {
		return
	}
	var list v1.ClusterList
	if err := s.client.List(r.Context(), &list); err != nil {
		writeAPIError(w, "list Clusters", err)
		return
	}
	out := make([]view.ClusterSummary, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, view.SummarizeCluster(&list.Items[i]))
	}
	writeTable(w, out, func(a, b view.ClusterSummary) bool { return a.Name < b.Name })
}

// getCluster answers the Cluster page to a person who may get the Cluster; its deployments
// are those of the namespaces they may list Servings in.
func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) {
	var c v1.Cluster
	name := r.PathValue("name")
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "clusters", name: name}) {
		return
	}
	if err := s.client.Get(r.Context(), client.ObjectKey{Name: name}, &c); err != nil {
		writeAPIError(w, "get Cluster "+name, err)
		return
	}
	apps, err := s.applications(r.Context(), client.MatchingLabels{
		argocd.LabelCluster: c.Name, argocd.LabelManagedBy: argocd.ManagedByKokumi,
	})
	if err != nil {
		writeAPIError(w, "list the Cluster's Applications", err)
		return
	}
	apps, err = keepListable(s, r.Context(), deliveryGroup, "servings", apps, func(app *argocd.Application) string {
		return app.GetLabels()[argocd.LabelServingNamespace]
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// The rows show what the Servings' status says of the cluster, as their pages do.
	var servings v1.ServingList
	if err := s.client.List(r.Context(), &servings, client.UnsafeDisableDeepCopy); err != nil {
		writeAPIError(w, "list Servings", err)
		return
	}
	byName := make(map[string]*v1.Serving, len(servings.Items))
	for i := range servings.Items {
		byName[servings.Items[i].Namespace+"/"+servings.Items[i].Name] = &servings.Items[i]
	}
	d := view.ClusterDetail{ClusterSummary: view.SummarizeCluster(&c)}
	d.Deployments, d.DeploymentsOmitted = view.ClusterDeployments(&c, apps, byName, s.opts.ArgoCDURL)
	writeJSON(w, http.StatusOK, d)
}

// listEnvironments lists a namespace's Environments to a person who may list them.
func (s *Server) listEnvironments(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, access{verb: "list", group: deliveryGroup, resource: "environments", namespace: r.PathValue("ns")}) {
		return
	}
	var list v1.EnvironmentList
	if err := s.client.List(r.Context(), &list, client.InNamespace(r.PathValue("ns"))); err != nil {
		writeAPIError(w, "list Environments", err)
		return
	}
	out := make([]view.EnvironmentSummary, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, view.EnvironmentSummary{
			Name: e.Name, Clusters: e.Status.Clusters, ReadyClusters: e.Status.ReadyClusters,
			Ready: view.ReadyOf(e.Status.Conditions), Requires: view.RequirementsOf(&e), Approvals: rollout.Required(e.Spec.Approval),
		})
	}
	create, err := s.can(r.Context(), createOrder(r.PathValue("ns")))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	kept, omitted := view.CapRows(out)
	// can says whether the person may create an Order here: the New Order form disables its
	// button, with the reason, when they may not.
	writeJSON(w, http.StatusOK, map[string]any{"items": kept, "omitted": omitted, "can": map[string]view.Can{"createOrder": create}})
}

// ProductSummary is one Product of a namespace, as the Order form offers it.
type ProductSummary struct {
	Name            string `json:"name"`
	Source          string `json:"source"`
	TargetNamespace string `json:"targetNamespace,omitempty"`
}

// listProducts lists a namespace's Products to a person who may list them.
func (s *Server) listProducts(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, access{verb: "list", group: deliveryGroup, resource: "products", namespace: r.PathValue("ns")}) {
		return
	}
	var list v1.ProductList
	if err := s.client.List(r.Context(), &list, client.InNamespace(r.PathValue("ns"))); err != nil {
		writeAPIError(w, "list Products", err)
		return
	}
	out := make([]ProductSummary, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, ProductSummary{Name: p.Name, Source: p.Spec.Source.URL, TargetNamespace: p.Spec.TargetNamespace})
	}
	writeTable(w, out, func(a, b ProductSummary) bool { return a.Name < b.Name })
}

// OrderRequest is the body of POST /api/v1/namespaces/{ns}/orders.
type OrderRequest struct {
	Name    string `json:"name"`
	Product string `json:"product"`
	// Environment may be empty when the namespace has exactly one Environment.
	Environment     string `json:"environment"`
	TargetNamespace string `json:"targetNamespace"`
	// Promotion is Manual or Automatic; empty takes the Order's default, Manual: the Serving
	// deploys nothing until a person promotes a Preparation.
	Promotion string `json:"promotion"`
}

// FieldError names the field of a request that is wrong, and how to fix it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// maxNamesOffered caps the names a refusal of an Order offers to pick from.
const maxNamesOffered = 5

// createOrder creates an Order as the person who asks (the API server's RBAC decides), picking
// the namespace's only Environment when none is named, and refusing one that names an
// Environment or a Product the namespace lacks, with every wrong field at once.
func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx, ns := r.Context(), r.PathValue("ns")
	var req OrderRequest
	if !readJSON(w, r, &req) {
		return
	}
	c, err := s.clientFor(ctx)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// What the namespace offers is read as the person: one who may not list it learns nothing
	// of it, and the API server decides the Order then. It is read live, not from the cache:
	// a Product created a moment ago is there.
	var live client.Reader = c
	if identityOf(ctx).Admin {
		live = s.reader
	}
	var envs v1.EnvironmentList
	environments, err := namesIn(ctx, live, ns, &envs, func() []string { return namesOf(envs.Items, func(e *v1.Environment) string { return e.Name }) })
	if err != nil {
		writeAPIError(w, "list Environments of "+ns, err)
		return
	}
	var prods v1.ProductList
	products, err := namesIn(ctx, live, ns, &prods, func() []string { return namesOf(prods.Items, func(p *v1.Product) string { return p.Name }) })
	if err != nil {
		writeAPIError(w, "list Products of "+ns, err)
		return
	}
	if req.Environment == "" && len(environments) == 1 {
		req.Environment = environments[0]
	}
	if errs := validateOrder(req, ns, environments, products); len(errs) > 0 {
		writeFieldError(w, errs...)
		return
	}
	o := &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: req.Name},
		Spec: v1.OrderSpec{
			ProductRef:      v1.LocalObjectReference{Name: req.Product},
			EnvironmentRef:  v1.LocalObjectReference{Name: req.Environment},
			TargetNamespace: req.TargetNamespace,
			Promotion:       v1.Promotion{Mode: v1.PromotionMode(req.Promotion)},
		},
	}
	if err := c.Create(ctx, o); err != nil {
		// The API server's refusal of a field goes beside that field: "already exists" and a rule
		// of the Order as a whole (its path "<nil>") beside Name.
		if fields := orderCreateFieldErrors(err, ns, req.Name); len(fields) > 0 {
			code := http.StatusUnprocessableEntity
			if apierrors.IsAlreadyExists(err) {
				code = http.StatusConflict
			}
			writeJSON(w, code, map[string]any{"error": fields[0].Field + ": " + fields[0].Message, "fields": fields})
			return
		}
		writeAPIError(w, "create Order "+ns+"/"+req.Name, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"namespace": o.Namespace, "name": o.Name})
}

// namesIn lists list in ns with c and returns the names names reads of it, sorted; nil (not
// known) when c may not list them.
func namesIn(ctx context.Context, c client.Reader, ns string, list client.ObjectList, names func() []string) ([]string, error) {
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil
		}
		return nil, err
	}
	out := names()
	sort.Strings(out)
	if out == nil {
		out = []string{} // known: none
	}
	return out, nil
}

// namesOf returns the name of each item.
func namesOf[T any](items []T, name func(*T) string) []string {
	out := make([]string, 0, len(items))
	for i := range items {
		out = append(out, name(&items[i]))
	}
	return out
}

// validateOrder checks what the API server would refuse with a less helpful message, and that
// the Environment and the Product named are among those of the namespace ns (environments and
// products, sorted; nil when the person may not list them, and they are not checked).
func validateOrder(req OrderRequest, ns string, environments, products []string) []FieldError {
	var errs []FieldError
	dns := func(field, value, what string) bool {
		if value == "" {
			errs = append(errs, FieldError{field, what + " is required"})
			return false
		}
		if msgs := validation.IsDNS1123Subdomain(value); len(msgs) > 0 {
			errs = append(errs, FieldError{field, fmt.Sprintf("%q is not a valid name: %s", value, msgs[0])})
			return false
		}
		return true
	}
	exists := func(field, kind, value string, names []string, none string) {
		if names == nil || slices.Contains(names, value) {
			return
		}
		msg := fmt.Sprintf("no %s %q in %s: ", kind, value, ns)
		switch {
		case len(names) == 0:
			msg += none
		default:
			msg += "pick one of " + text.FirstNames(names, maxNamesOffered)
		}
		errs = append(errs, FieldError{field, msg})
	}
	if dns("name", req.Name, "the Order's name") && len(req.Name) > v1.MaxOrderNameLength {
		errs = append(errs, FieldError{"name", fmt.Sprintf("%d characters: %s", len(req.Name), v1.OrderNameTooLong)})
	}
	if dns("product", req.Product, "a Product of this namespace") {
		exists("product", "Product", req.Product, products, "it has none: create a Product first")
	}
	switch {
	case req.Environment == "" && len(environments) == 0 && environments != nil:
		errs = append(errs, FieldError{"environment", fmt.Sprintf("%s has no Environment: an admin sets one up for it", ns)})
	case req.Environment == "":
		errs = append(errs, FieldError{"environment", "pick one of the namespace's Environments (it has none, or more than one)"})
	default:
		if dns("environment", req.Environment, "an Environment") {
			exists("environment", "Environment", req.Environment, environments, "it has none: an admin sets one up for it")
		}
	}
	if req.TargetNamespace != "" {
		if msgs := validation.IsDNS1123Label(req.TargetNamespace); len(msgs) > 0 {
			errs = append(errs, FieldError{"targetNamespace", fmt.Sprintf("%q is not a valid namespace: %s", req.TargetNamespace, msgs[0])})
		}
	}
	switch v1.PromotionMode(req.Promotion) {
	case "", v1.PromotionAutomatic, v1.PromotionManual:
	default:
		errs = append(errs, FieldError{"promotion", fmt.Sprintf("%q is not a promotion mode: use Automatic or Manual", req.Promotion)})
	}
	return errs
}

// applications lists Kokumi's Applications in Argo CD's namespace that match the labels.
func (s *Server) applications(ctx context.Context, labels client.MatchingLabels) ([]argocd.Application, error) {
	return s.listApplications(ctx, labels, true)
}

// listApplications is applications, with the cache's own objects (not to be changed) unless
// copied.
func (s *Server) listApplications(ctx context.Context, labels client.MatchingLabels, copied bool) ([]argocd.Application, error) {
	list := &argocd.ApplicationList{}
	var c client.Reader = s.client
	if s.argo != nil {
		if !s.argo.Installed() {
			return nil, nil // no Application without Argo CD
		}
		c = s.argo.Client
	}
	if s.argo != nil {
		// By index (a Serving's, a Cluster's), as argocd.Application (what the pages read); copied, as
		// the rows are built from them.
		if err := s.argo.ListApplications(ctx, list, s.opts.ArgoCDNamespace, labels); err != nil {
			return nil, err
		}
		if !copied {
			return list.Items, nil
		}
		return list.DeepCopy().Items, nil
	}
	if err := c.List(ctx, list, client.InNamespace(s.opts.ArgoCDNamespace), labels); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// writeTable answers a table: its rows sorted by less, capped at view.MaxRows, and the count of the
// rows past the cap.
func writeTable[T any](w http.ResponseWriter, rows []T, less func(a, b T) bool) {
	sort.Slice(rows, func(i, j int) bool { return less(rows[i], rows[j]) })
	kept, omitted := view.CapRows(rows)
	writeJSON(w, http.StatusOK, map[string]any{"items": kept, "omitted": omitted})
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "read the request body as JSON: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// writeAPIError answers with the status that matches the API server's error.
func writeAPIError(w http.ResponseWriter, what string, err error) {
	code := http.StatusInternalServerError
	switch {
	case apierrors.IsNotFound(err):
		code = http.StatusNotFound
	case apierrors.IsAlreadyExists(err):
		code = http.StatusConflict
	case apierrors.IsInvalid(err):
		code = http.StatusUnprocessableEntity
	case apierrors.IsForbidden(err):
		code = http.StatusForbidden
	case apierrors.IsBadRequest(err):
		code = http.StatusBadRequest
	}
	writeError(w, code, fmt.Sprintf("%s: %v", what, err))
}
