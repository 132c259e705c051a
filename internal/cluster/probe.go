package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/transport"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Result is what one probe of a server found.
type Result struct {
	// Reason is ReasonConnected, ReasonUnauthorized or ReasonUnreachable.
	Reason string
	// Message says what the server answered, or the network or TLS error; never a credential.
	Message string
	// Version is the server's Kubernetes version, when connected.
	Version string
}

// Connected reports whether the server answered with these credentials.
func (r Result) Connected() bool { return r.Reason == v1.ReasonConnected }

// Probe asks server for /version with the credentials, giving up after timeout. It builds a
// client for this one probe and closes its connections after: a Prober's Client is what probes
// a fleet.
func Probe(ctx context.Context, server string, c Credentials, timeout time.Duration) Result {
	pc, res := NewClient(server, c, timeout, false)
	if pc == nil {
		return res
	}
	defer pc.Close()
	return pc.Probe(ctx)
}

// Client probes one server with one set of credentials again and again. It keeps what is
// costly to build (the TLS configuration, with its parsed CA and client certificate) and, when
// built to keep alive, its connection from probe to probe: no handshake after the first, for
// one idle TLS connection per Client between probes, and no goroutine (see direct). Otherwise each
// probe dials, makes a TLS handshake and closes the connection after the answer: nothing is held
// between probes, for a handshake's CPU each probe, and each probe sees the server, its
// certificate included, as it is then. Build a new Client when the server or the credentials
// change (see Key).
//
// A probe is one GET of /version written as built once (the bearer token and user agent set
// on it) on the Client's own connection, and its answer decoded into the one field read:
// none of client-go's per-request machinery (rate limiter, wrappers that clone the request,
// metrics, the scheme's decoder), which at 10,000 Clusters is most of a quiet minute's CPU.
type Client struct {
	server  string
	creds   Credentials
	timeout time.Duration
	// direct sends the request, unless a proxy is set for the server: then transport does.
	direct    *direct
	transport *http.Transport
	client    *http.Client
	request   *http.Request
}

// probeBufferSize is the size of a probe connection's read and write buffers.
const probeBufferSize = 1 << 10

// maxVersionAnswer bounds what a probe reads of an answer: /version is a few hundred bytes.
const maxVersionAnswer = 64 << 10

// NewClient builds a Client of server with the credentials, each probe giving up after timeout
// and keeping its connection for the next when keepAlive. When the configuration is unusable it
// returns nil and the Result that says why.
func NewClient(server string, c Credentials, timeout time.Duration, keepAlive bool) (*Client, Result) {
	cfg := c.RESTConfig(server, timeout)
	unusable := func(err error) (*Client, Result) {
		return nil, Result{Reason: v1.ReasonUnreachable, Message: c.Redact(fmt.Sprintf("build a client for %s: %v", server, err))}
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return unusable(err)
	}
	tlsConfig, err := transport.TLSConfigFor(tc)
	if err != nil {
		return unusable(err)
	}
	// A client certificate, CA and TLS options are in the TLS configuration; the bearer token
	// and the user agent are on the request, as client-go's wrappers would set them.
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(server, "/")+"/version", nil)
	if err != nil {
		return unusable(err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", cfg.UserAgent)
	if c.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.BearerToken)
	}
	pc := &Client{server: server, creds: c, timeout: timeout}
	if proxy, err := http.ProxyFromEnvironment(req); err != nil || proxy == nil {
		if pc.direct, err = newDirect(req.URL.String(), req.Header, tlsConfig, timeout, keepAlive); err != nil {
			return unusable(err)
		}
		return pc, Result{}
	}
	// Through a proxy: the Client's own transport, never one of client-go's process-wide
	// cache, which never forgets: rotated credentials and deleted Clusters leave nothing behind.
	pc.transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: timeout,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		DisableKeepAlives:   !keepAlive,
		ReadBufferSize:      probeBufferSize,
		WriteBufferSize:     probeBufferSize,
	})
	pc.client, pc.request = &http.Client{Transport: pc.transport, Timeout: timeout}, req
	return pc, Result{}
}

// Probe asks the server for /version, giving up after the Client's timeout.
func (p *Client) Probe(ctx context.Context) Result {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	version, err := p.version(ctx)
	if err != nil {
		// A connection that failed may be half open: the next probe dials afresh, and sees the
		// server as it is then.
		p.dropIdle()
		return Classify(p.server, p.creds, err)
	}
	return Result{Reason: v1.ReasonConnected, Message: fmt.Sprintf("%s answered as Kubernetes %s", p.server, version), Version: version}
}

// version is the gitVersion the server answers /version with, or the error an API client
// would see: a non-2xx answer as the API server's Status, or a generic error of its code.
func (p *Client) version(ctx context.Context) (string, error) {
	a, err := p.get(ctx)
	if err != nil {
		return "", err
	}
	if a.code < http.StatusOK || a.code >= http.StatusMultipleChoices {
		return "", answerError(a)
	}
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(a.body, &info); err != nil {
		return "", fmt.Errorf("decode the answer of %s/version: %w", strings.TrimSuffix(p.server, "/"), err)
	}
	return info.GitVersion, nil
}

// get sends the request directly, or through the proxy's transport.
func (p *Client) get(ctx context.Context) (answer, error) {
	if p.direct != nil {
		return p.direct.get(ctx)
	}
	resp, err := p.client.Do(p.request.WithContext(ctx))
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionAnswer))
	if err != nil {
		return answer{}, fmt.Errorf("read the answer of %s: %w", p.request.URL.Redacted(), err)
	}
	return answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: body}, nil
}

// answerError is the error of an answer that is not a success, as client-go's REST client
// makes it: the Status the API server sent, or a generic one of the HTTP code and the body.
func answerError(a answer) error {
	var status metav1.Status
	if json.Unmarshal(a.body, &status) == nil && status.Kind == "Status" && status.Status == metav1.StatusFailure {
		if status.Code == 0 {
			status.Code = int32(a.code)
		}
		return &apierrors.StatusError{ErrStatus: status}
	}
	retryAfter, _ := strconv.Atoi(a.retryAfter)
	return apierrors.NewGenericServerResponse(a.code, http.MethodGet, schema.GroupResource{}, "", strings.TrimSpace(string(a.body)), retryAfter, true)
}

// Close closes the Client's idle connections; a Client is not used after.
func (p *Client) Close() {
	if p.direct != nil {
		p.direct.close()
		return
	}
	p.transport.CloseIdleConnections()
}

// dropIdle closes the kept connection, if any.
func (p *Client) dropIdle() {
	if p.direct != nil {
		p.direct.dropIdle()
		return
	}
	p.transport.CloseIdleConnections()
}

// Key identifies a server and credentials without holding them: a Client built for another Key
// is stale.
func Key(server string, c Credentials) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(server), []byte(c.BearerToken), c.CAData, c.CertData, c.KeyData, []byte(c.ServerName), []byte(strconv.FormatBool(c.Insecure))} {
		// Length-prefixed, so that no two different tuples hash alike.
		_, _ = fmt.Fprintf(h, "%d:", len(part))
		_, _ = h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Classify turns the error of a probe into a Ready reason and a message carrying the network
// or TLS error, with the credentials redacted.
func Classify(server string, c Credentials, err error) Result {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsUnauthorized(err):
		return Result{Reason: v1.ReasonUnauthorized, Message: c.Redact(fmt.Sprintf(
			"%s refused the credentials (401 Unauthorized): renew the token or certificate in the credentials Secret", server))}
	case apierrors.IsForbidden(err):
		return Result{Reason: v1.ReasonUnauthorized, Message: c.Redact(fmt.Sprintf(
			"%s denies these credentials /version (403 Forbidden): %v; grant the identity access", server, errorText(err)))}
	case errors.As(err, &status) && status.Status().Code >= http.StatusBadRequest:
		return Result{Reason: v1.ReasonUnreachable, Message: c.Redact(fmt.Sprintf(
			"%s answered /version with HTTP %d: %v", server, status.Status().Code, errorText(err)))}
	default:
		return Result{Reason: v1.ReasonUnreachable, Message: c.Redact(fmt.Sprintf(
			"%s is unreachable: %v: check spec.server, and that the hub reaches it", server, errorText(err)))}
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FailuresBeforeNotReady is how many probes in a row must fail before a Ready Cluster turns
// not Ready: one failure is retried first, so that a blip does not flap the Cluster.
const FailuresBeforeNotReady = 2

// ReportFailure decides whether a failed probe changes Ready now: at once when the Cluster is
// not Ready anyway, else only after FailuresBeforeNotReady failures in a row.
func ReportFailure(wasReady bool, failuresInARow int) bool {
	return !wasReady || failuresInARow >= FailuresBeforeNotReady
}

// Timeout is how long one probe waits for the server: half the period, between 2 and 10 seconds.
func Timeout(period time.Duration) time.Duration {
	return clamp(period/2, 2*time.Second, 10*time.Second)
}

// RetryDelay is how soon a failed probe of a Ready Cluster is retried: a sixth of the period,
// between 1 and 5 seconds.
func RetryDelay(period time.Duration) time.Duration {
	return clamp(period/6, time.Second, 5*time.Second)
}

// Jitter spreads probes over ±10% of the period so that many Clusters do not probe in step;
// r is a random number in [0, 1).
func Jitter(period time.Duration, r float64) time.Duration {
	return period - period/10 + time.Duration(r*float64(period/5))
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}
