package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The bundled registry's inventory: what its pusher lists to find the manifests nothing names
// any more, and the conditional deletion that never deletes a repository's manifest while a push
// to it is recent. Other registries have neither.

// CatalogPath is the registry API's list of repositories (GET, paged with n and last); the
// bundled registry answers it to the pusher only.
const CatalogPath = "/v2/_catalog"

// ManifestsSuffix ends the path of the bundled registry's list of a repository's manifests:
// GET /v2/<name>/_kokumi/manifests?n=<count>&last=<digest>, to the pusher only. A repository
// name has no component starting with "_", so the path is no other route's.
const ManifestsSuffix = "/_kokumi/manifests"

// MaxManifestsPage is the most manifests one page of the list holds.
const MaxManifestsPage = 1000

// ManifestList is one page of a repository's manifests, by digest.
type ManifestList struct {
	// Manifests are the manifests of the page, sorted by digest.
	Manifests []ManifestEntry `json:"manifests"`
	// Newest is when the last manifest of the whole repository (any page) was pushed: a push
	// writes its manifest at that time, pushing again the same manifest too. Zero when the
	// repository has none.
	Newest time.Time `json:"newest"`
	// More says that manifests come after the page's last one.
	More bool `json:"more,omitempty"`
}

// ManifestEntry is one manifest of a repository.
type ManifestEntry struct {
	// Digest is the manifest's digest.
	Digest string `json:"digest"`
	// Pushed is when the manifest was last pushed.
	Pushed time.Time `json:"pushed"`
}

// ErrModified is the bundled registry's refusal of a conditional deletion: a manifest of the
// repository was pushed after the time given.
var ErrModified = errors.New("a manifest of the repository was pushed since")

// Catalog lists up to n repositories of registry (host:port) after last, and whether more follow.
func (c *Client) Catalog(ctx context.Context, registry string, n int, last string) ([]string, bool, error) {
	q := url.Values{"n": {strconv.Itoa(n)}}
	if last != "" {
		q.Set("last", last)
	}
	var page struct {
		Repositories []string `json:"repositories"`
	}
	header, err := c.call(ctx, http.MethodGet, registry, CatalogPath+"?"+q.Encode(), nil, &page)
	if err != nil {
		return nil, false, fmt.Errorf("list the repositories of %s: %w", registry, err)
	}
	return page.Repositories, header.Get("Link") != "", nil
}

// Manifests lists up to n manifests of repository (host/path) after the digest last.
func (c *Client) Manifests(ctx context.Context, repository string, n int, last string) (ManifestList, error) {
	host, path, ok := strings.Cut(repository, "/")
	if !ok {
		return ManifestList{}, fmt.Errorf("repository %q names no path", repository)
	}
	q := url.Values{"n": {strconv.Itoa(n)}}
	if last != "" {
		q.Set("last", last)
	}
	var list ManifestList
	if _, err := c.call(ctx, http.MethodGet, host, "/v2/"+path+ManifestsSuffix+"?"+q.Encode(), nil, &list); err != nil {
		return ManifestList{}, fmt.Errorf("list the manifests of %s: %w", repository, err)
	}
	return list, nil
}

// DeleteManifestUnmodifiedSince deletes repository@digest (and the tags that name it) in the
// bundled registry unless a manifest of the repository was pushed after since: then it returns
// ErrModified. A manifest already gone is no error.
func (c *Client) DeleteManifestUnmodifiedSince(ctx context.Context, repository, digest string, since time.Time) error {
	host, path, ok := strings.Cut(repository, "/")
	if !ok {
		return fmt.Errorf("repository %q names no path", repository)
	}
	header := http.Header{"If-Unmodified-Since": {since.UTC().Format(http.TimeFormat)}}
	_, err := c.call(ctx, http.MethodDelete, host, "/v2/"+path+"/manifests/"+digest, header, nil)
	var status *statusError
	switch {
	case errors.As(err, &status) && status.code == http.StatusNotFound:
		return nil
	case errors.As(err, &status) && status.code == http.StatusPreconditionFailed:
		return fmt.Errorf("delete %s@%s: %w", repository, digest, ErrModified)
	case err != nil:
		return fmt.Errorf("delete %s@%s: %w", repository, digest, err)
	}
	return nil
}

// statusError is an answer of a registry other than 2xx.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.body)
}

// call sends one request to registry (host:port) signed in with the client's credential for it,
// and decodes a JSON answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, registry, pathAndQuery string, header http.Header, out any) (http.Header, error) {
	scheme := "https"
	if c.UsesPlainHTTP(registry) {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+registry+pathAndQuery, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if cred, ok := c.Credentials.Lookup(registry); ok && cred.Username != "" {
		req.SetBasicAuth(cred.Username, cred.Password)
	}
	httpClient := c.HTTPClient
	if httpClient == nil {
		httpClient = defaultHTTPClient
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, &statusError{code: resp.StatusCode, body: strings.TrimSpace(string(body))}
	}
	if out == nil {
		return resp.Header, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxManifest)).Decode(out); err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", registry, err)
	}
	return resp.Header, nil
}
