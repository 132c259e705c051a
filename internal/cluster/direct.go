package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// direct sends a Client's one request over HTTP/1.1 on a connection of its own, in the goroutine
// that probes: no connection pool, no reader and writer goroutines per connection, no buffers
// held between probes. A kept connection is one TLS connection and nothing else: net/http's
// transport holds two goroutines (their stacks), two buffers and its bookkeeping for each, which
// at 10,000 Clusters are some 20,000 goroutines that every garbage collection scans, and a
// hand-off between goroutines at every probe. It is what a Client uses unless a proxy is set
// for the server (HTTPS_PROXY and its kin), which net/http's transport then reaches.
type direct struct {
	// url is the request's URL, for errors; it holds no credential.
	url string
	// addr is what is dialed: host:port, the scheme's port by default.
	addr string
	// tls is the TLS configuration of the connection; nil for http.
	tls *tls.Config
	// dialer dials with the Client's timeout.
	dialer net.Dialer
	// request is the request as sent, token included.
	request []byte
	// keepAlive keeps the connection from one probe to the next.
	keepAlive bool

	mu     sync.Mutex
	idle   net.Conn
	closed bool
}

// newDirect prepares the request to rawURL with the headers, and the connection to its host; it
// fails on a URL or a header value that cannot be sent.
func newDirect(rawURL string, header http.Header, tlsConfig *tls.Config, timeout time.Duration, keepAlive bool) (*direct, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rawURL, err)
	}
	port := u.Port()
	switch u.Scheme {
	case "https":
		if port == "" {
			port = "443"
		}
		if tlsConfig == nil {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tlsConfig = tlsConfig.Clone()
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = u.Hostname()
		}
		// HTTP/1.1 only: the request is written as such.
		tlsConfig.NextProtos = []string{"http/1.1"}
	case "http":
		if port == "" {
			port = "80"
		}
		tlsConfig = nil
	default:
		return nil, fmt.Errorf("the server %s is neither https nor http", u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("the server %s carries user information: put credentials in the Secret", u.Redacted())
	}
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n")
	for name, values := range header {
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("the %s header holds a character a request cannot carry (a line break?): check the credentials Secret", name)
			}
			req = append(req, name+": "+v+"\r\n"...)
		}
	}
	if !keepAlive {
		req = append(req, "Connection: close\r\n"...)
	}
	req = append(req, "\r\n"...)
	return &direct{url: u.Redacted(), addr: net.JoinHostPort(u.Hostname(), port), tls: tlsConfig,
		dialer: net.Dialer{Timeout: timeout}, request: req, keepAlive: keepAlive}, nil
}

// answer is what the server answered.
type answer struct {
	code       int
	retryAfter string
	body       []byte
}

// get sends the request and reads the answer, over the kept connection if there is one. A kept
// connection the server closed meanwhile (idle connections are closed by servers and load
// balancers) fails before a byte of the answer is read: the request is then sent once more on a
// new connection, as net/http's transport retries an idempotent request.
func (d *direct) get(ctx context.Context) (answer, error) {
	conn := d.take()
	reused := conn != nil
	for {
		if conn == nil {
			var err error
			if conn, err = d.dial(ctx); err != nil {
				return answer{}, &url.Error{Op: "Get", URL: d.url, Err: err}
			}
		}
		a, keep, read, err := d.exchange(ctx, conn)
		if err == nil {
			if keep {
				d.put(conn)
			} else {
				_ = conn.Close()
			}
			return a, nil
		}
		_ = conn.Close()
		if reused && read == 0 && ctx.Err() == nil && closedByPeer(err) {
			conn, reused = nil, false
			continue
		}
		return answer{}, &url.Error{Op: "Get", URL: d.url, Err: err}
	}
}

// closedByPeer reports whether err is a connection closed or reset under the request.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// dial opens a connection to the server, and makes its TLS handshake.
func (d *direct) dial(ctx context.Context) (net.Conn, error) {
	raw, err := d.dialer.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	if d.tls == nil {
		return raw, nil
	}
	conn := tls.Client(raw, d.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// readers are the buffered readers of probes under way: a kept connection holds none.
var readers = sync.Pool{New: func() any { return &countingReader{br: bufio.NewReaderSize(nil, probeBufferSize)} }}

// countingReader reads a connection through a buffer, counting the bytes the connection gave.
type countingReader struct {
	conn net.Conn
	n    int
	br   *bufio.Reader
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.conn.Read(p)
	c.n += n
	return n, err
}

// exchange writes the request on conn and reads the answer, whole up to maxVersionAnswer. keep
// says whether the connection may carry the next request; read is how many bytes the server
// sent before an error.
func (d *direct) exchange(ctx context.Context, conn net.Conn) (a answer, keep bool, read int, err error) {
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return answer{}, false, 0, err
		}
	}
	// A cancelled probe (the controller stopping) ends at once, as its deadline passed.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(d.request); err != nil {
		return answer{}, false, 0, err
	}
	r := readers.Get().(*countingReader)
	r.conn, r.n = conn, 0
	r.br.Reset(r)
	defer func() {
		read = r.n
		r.conn = nil
		r.br.Reset(nil)
		readers.Put(r)
	}()
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return answer{}, false, 0, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionAnswer+1))
	if err != nil {
		return answer{}, false, 0, fmt.Errorf("read the answer: %w", err)
	}
	if len(body) > maxVersionAnswer {
		return answer{}, false, 0, fmt.Errorf("the answer is over %d bytes", maxVersionAnswer)
	}
	// The connection carries the next request only when the answer was read to its end, and
	// nothing more came.
	keep = d.keepAlive && !resp.Close && r.br.Buffered() == 0 && ctx.Err() == nil
	return answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: body}, keep, 0, nil
}

// take returns the kept connection, if any; the probe owns it until put.
func (d *direct) take() net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	conn := d.idle
	d.idle = nil
	return conn
}

// put keeps conn for the next probe, or closes it when one is kept already or the Client closed.
func (d *direct) put(conn net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.idle != nil || d.closed {
		_ = conn.Close()
		return
	}
	d.idle = conn
}

// close closes the kept connection; a later put closes its connection too.
func (d *direct) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.idle != nil {
		_ = d.idle.Close()
		d.idle = nil
	}
}

// dropIdle closes the kept connection, if any: the next probe dials afresh.
func (d *direct) dropIdle() {
	if conn := d.take(); conn != nil {
		_ = conn.Close()
	}
}
