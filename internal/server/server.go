// Package server is Kokumi's API and UI: a small REST API over Servings, Clusters,
// Environments, Products and Orders, server-sent events that tell the UI what changed, one
// admin token for login, and the web UI embedded in the binary.
//
// The server reads through the manager's cache, so a page costs no request to the API server
// (but for the public keys of deployment records, which it may only get), and writes with its
// own ServiceAccount (new Orders, and promotions); whoever holds the token may order and
// promote.
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
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// The server reads what the UI shows and creates Orders; promotion.go adds the patch of Servings,
// publickeys.go the read of the public keys in Kokumi's namespace.
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings;clusters;environments;products;orders;preparations,verbs=get;list;watch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders,verbs=create
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=applications,verbs=get;list;watch

//go:embed ui
var uiFiles embed.FS

// maxBody caps a request body.
const maxBody = 1 << 20

// Options configures the server.
type Options struct {
	// Addr is the address to listen on, such as ":8090".
	Addr string
	// Token is the admin token; logging in with it, or sending it as a bearer token, allows
	// everything the API offers. It must not be empty.
	Token string
	// SessionTTL is how long a login lasts.
	SessionTTL time.Duration
	// ArgoCDNamespace is where Kokumi's Applications live.
	ArgoCDNamespace string
	// ArgoCDURL is the base address of Argo CD's UI; when set, every Application row links
	// there.
	ArgoCDURL string
	// TLSCertFile and TLSKeyFile serve HTTPS when both are set.
	TLSCertFile, TLSKeyFile string
	// Namespace is Kokumi's own namespace, where the public keys of deployment records are
	// listed; empty means controller.DefaultConfig's.
	Namespace string
	// BundledRegistry is the host:port of the bundled registry, reached over plain HTTP to
	// read deployment records; empty means controller.DefaultConfig's.
	BundledRegistry string
}

// Server serves the API and the UI.
type Server struct {
	opts   Options
	client client.Client
	// reader reads without a cache what the server may only get: the public keys.
	reader    client.Reader
	informers cache.Informers
	auth      *auth
	broker    *broker
	// pipeline decides promotions as the Serving reconciler does; its Records and Keys read
	// the deployment records the Serving page shows.
	pipeline *controller.Pipeline
	records  *recordCache
}

// New returns a server that reads and writes through c, reads the public keys through reader,
// and watches through informers: usually a manager's client, API reader and cache.
func New(c client.Client, reader client.Reader, informers cache.Informers, o Options) (*Server, error) {
	if o.Token == "" {
		return nil, errors.New("the server needs a token: set --token-file or KOKUMI_TOKEN")
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.ArgoCDNamespace == "" {
		o.ArgoCDNamespace = argocd.DefaultNamespace
	}
	d := controller.DefaultConfig()
	if o.Namespace == "" {
		o.Namespace = d.Namespace
	}
	if o.BundledRegistry == "" {
		o.BundledRegistry = d.BundledRegistry
	}
	cfg := controller.Config{Namespace: o.Namespace, ArgoCDNamespace: o.ArgoCDNamespace, BundledRegistry: o.BundledRegistry}
	p := controller.NewPipeline(c, reader, cfg)
	// The keys are read without the cache, which would list and watch every ConfigMap of the
	// cluster: the server may only get the one in Kokumi's namespace.
	p.Keys = &trustedKeys{source: &record.Keys{Client: uncached{Client: c, reader: reader}, Namespace: o.Namespace}}
	return &Server{
		opts: o, client: c, reader: reader, informers: informers, auth: newAuth(o.Token, o.SessionTTL), broker: newBroker(),
		pipeline: p, records: &recordCache{},
	}, nil
}

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	req := s.auth.require
	mux.HandleFunc("POST /api/v1/login", s.login)
	mux.HandleFunc("POST /api/v1/logout", s.logout)
	mux.HandleFunc("GET /api/v1/me", s.me)
	mux.HandleFunc("GET /api/v1/servings", req(s.listServings))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/servings/{name}", req(s.getServing))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/servings/{name}/promotion", req(s.promote))
	mux.HandleFunc("GET /api/v1/clusters", req(s.listClusters))
	mux.HandleFunc("GET /api/v1/clusters/{name}", req(s.getCluster))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/environments", req(s.listEnvironments))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/products", req(s.listProducts))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/orders", req(s.createOrder))
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
	files := withSecurityHeaders(http.FileServerFS(ui))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "the UI's files are read with GET")
			return
		}
		files.ServeHTTP(w, r)
	})
	return mux
}

func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// AddToManager runs a server in mgr, reading and writing through the manager's client, reading
// the public keys through its API reader and watching through its cache: on ln, or on o.Addr
// when ln is nil.
func AddToManager(mgr manager.Manager, o Options, ln net.Listener) error {
	s, err := New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetCache(), o)
	if err != nil {
		return err
	}
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
		ReadHeaderTimeout: 10 * time.Second,
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

func (s *Server) listServings(w http.ResponseWriter, r *http.Request) {
	var list v1.ServingList
	var opts []client.ListOption
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := s.client.List(r.Context(), &list, opts...); err != nil {
		writeAPIError(w, "list Servings", err)
		return
	}
	out := make([]ServingSummary, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, summarizeServing(&list.Items[i]))
	}
	writeTable(w, out, func(a, b ServingSummary) bool {
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

func (s *Server) getServing(w http.ResponseWriter, r *http.Request) {
	var sv v1.Serving
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
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
	d := ServingDetail{ServingSummary: summarizeServing(&sv)}
	d.Rows, d.RowsOmitted = servingRows(&sv, apps, s.opts.ArgoCDURL)
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
	d.Records = s.recordsOf(r.Context(), &sv, preps)
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	var list v1.ClusterList
	if err := s.client.List(r.Context(), &list); err != nil {
		writeAPIError(w, "list Clusters", err)
		return
	}
	out := make([]ClusterSummary, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, summarizeCluster(&list.Items[i]))
	}
	writeTable(w, out, func(a, b ClusterSummary) bool { return a.Name < b.Name })
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) {
	var c v1.Cluster
	name := r.PathValue("name")
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
	d := ClusterDetail{ClusterSummary: summarizeCluster(&c)}
	d.Deployments, d.DeploymentsOmitted = clusterDeployments(apps, s.opts.ArgoCDURL)
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) listEnvironments(w http.ResponseWriter, r *http.Request) {
	var list v1.EnvironmentList
	if err := s.client.List(r.Context(), &list, client.InNamespace(r.PathValue("ns"))); err != nil {
		writeAPIError(w, "list Environments", err)
		return
	}
	out := make([]EnvironmentSummary, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, EnvironmentSummary{Name: e.Name, Clusters: e.Status.Clusters, Ready: readyOf(e.Status.Conditions), Requires: requirementsOf(&e)})
	}
	writeTable(w, out, func(a, b EnvironmentSummary) bool { return a.Name < b.Name })
}

// ProductSummary is one Product of a namespace, as the Order form offers it.
type ProductSummary struct {
	Name            string    `json:"name"`
	Source          string    `json:"source"`
	TargetNamespace string    `json:"targetNamespace,omitempty"`
	Ready           Condition `json:"ready"`
}

func (s *Server) listProducts(w http.ResponseWriter, r *http.Request) {
	var list v1.ProductList
	if err := s.client.List(r.Context(), &list, client.InNamespace(r.PathValue("ns"))); err != nil {
		writeAPIError(w, "list Products", err)
		return
	}
	out := make([]ProductSummary, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, ProductSummary{Name: p.Name, Source: p.Spec.Source.URL, TargetNamespace: p.Spec.TargetNamespace, Ready: readyOf(p.Status.Conditions)})
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

func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	var req OrderRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Environment == "" {
		var envs v1.EnvironmentList
		if err := s.client.List(r.Context(), &envs, client.InNamespace(ns)); err != nil {
			writeAPIError(w, "list Environments", err)
			return
		}
		if len(envs.Items) == 1 {
			req.Environment = envs.Items[0].Name
		}
	}
	if errs := validateOrder(req); len(errs) > 0 {
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
	if err := s.client.Create(r.Context(), o); err != nil {
		writeAPIError(w, "create Order "+ns+"/"+req.Name, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"namespace": o.Namespace, "name": o.Name})
}

// validateOrder checks what the API server would refuse with a less helpful message.
func validateOrder(req OrderRequest) []FieldError {
	var errs []FieldError
	dns := func(field, value, what string) {
		if value == "" {
			errs = append(errs, FieldError{field, what + " is required"})
			return
		}
		if msgs := validation.IsDNS1123Subdomain(value); len(msgs) > 0 {
			errs = append(errs, FieldError{field, fmt.Sprintf("%q is not a valid name: %s", value, msgs[0])})
		}
	}
	dns("name", req.Name, "the Order's name")
	dns("product", req.Product, "a Product of this namespace")
	if req.Environment == "" {
		errs = append(errs, FieldError{"environment", "pick one of the namespace's Environments (it has none, or more than one)"})
	} else {
		dns("environment", req.Environment, "an Environment")
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
func (s *Server) applications(ctx context.Context, labels client.MatchingLabels) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := s.client.List(ctx, list, client.InNamespace(s.opts.ArgoCDNamespace), labels); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// writeTable answers a table: its rows sorted by less, capped at MaxRows, and the count of the
// rows past the cap.
func writeTable[T any](w http.ResponseWriter, rows []T, less func(a, b T) bool) {
	sort.Slice(rows, func(i, j int) bool { return less(rows[i], rows[j]) })
	kept, omitted := capRows(rows)
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
