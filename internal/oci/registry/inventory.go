package registry

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// inventory serves, in front of distribution, what Kokumi's pusher needs to collect the
// manifests nothing names (see oci.ManifestsSuffix and oci.Client.DeleteManifestUnmodifiedSince):
// the list of a repository's manifests with when each was pushed, and the deletion of a manifest
// refused (412) when the repository was pushed to after If-Unmodified-Since. A push counts from
// when the pusher asks whether a manifest is there (HEAD), which is how a push that finds it
// there skips it, until its manifest is written; the registry's start counts as a push to every
// repository (what the pusher asked before is not kept). The pusher's HEADs, and the pushes and
// deletions of a repository's manifests, take a lock of that repository, so that the check and
// the deletion are one step that no push lands in between.
type inventory struct {
	next    http.Handler
	driver  storagedriver.StorageDriver
	started time.Time
	locks   [64]sync.Mutex

	mu sync.Mutex
	// asked is when the pusher last asked for a manifest of each repository.
	asked map[string]time.Time
}

// pusherKey marks the requests of the pusher in their context.
type pusherKey struct{}

// ServeHTTP implements http.Handler.
func (v *inventory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v2/"), oci.ManifestsSuffix); ok && strings.HasPrefix(r.URL.Path, "/v2/") {
		if r.Method != http.MethodGet {
			registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the list of manifests is read with GET")
			return
		}
		v.list(w, r, name)
		return
	}
	name, ref, ok := manifestRoute(r.URL.Path)
	pusherAsks := r.Method == http.MethodHead && r.Context().Value(pusherKey{}) != nil
	if !ok || (r.Method != http.MethodPut && r.Method != http.MethodDelete && !pusherAsks) {
		v.next.ServeHTTP(w, r)
		return
	}
	lock := v.lock(name)
	lock.Lock()
	defer lock.Unlock()
	if pusherAsks {
		v.mu.Lock()
		v.asked[name] = time.Now()
		v.mu.Unlock()
	}
	if since := r.Header.Get("If-Unmodified-Since"); since != "" && r.Method == http.MethodDelete {
		t, err := http.ParseTime(since)
		if err != nil {
			registryError(w, http.StatusBadRequest, "UNSUPPORTED", "If-Unmodified-Since is not an HTTP date: "+err.Error())
			return
		}
		if _, err := digest.Parse(ref); err != nil {
			registryError(w, http.StatusBadRequest, "DIGEST_INVALID", "a conditional deletion names the manifest by digest")
			return
		}
		newest, _, err := v.manifests(r, name)
		if err != nil {
			registryError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return
		}
		// HTTP dates count whole seconds.
		if newest.Truncate(time.Second).After(t) {
			registryError(w, http.StatusPreconditionFailed, "DENIED", "a manifest of "+name+" was pushed at "+newest.UTC().Format(time.RFC3339)+", after "+since)
			return
		}
	}
	v.next.ServeHTTP(w, r)
}

// lock is the lock of a repository's manifests.
func (v *inventory) lock(name string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return &v.locks[h.Sum32()%uint32(len(v.locks))]
}

// isManifestPath says whether path is /v2/<name>/manifests/<reference>, as distribution routes
// it: a reference (tag or digest) holds no slash, so the blob and upload routes never end so.
func isManifestPath(path string) bool {
	const part = "/manifests/"
	i := strings.LastIndex(path, part)
	if i <= len("/v2") || !strings.HasPrefix(path, "/v2/") {
		return false
	}
	ref := path[i+len(part):]
	return ref != "" && !strings.Contains(ref, "/")
}

// manifestRoute splits /v2/<name>/manifests/<reference>.
func manifestRoute(p string) (name, ref string, ok bool) {
	if !isManifestPath(p) {
		return "", "", false
	}
	i := strings.LastIndex(p, "/manifests/")
	return p[len("/v2/"):i], p[i+len("/manifests/"):], true
}

// list answers one page of the manifests of repository name (an oci.ManifestList).
func (v *inventory) list(w http.ResponseWriter, r *http.Request, name string) {
	n := oci.MaxManifestsPage
	if s := r.URL.Query().Get("n"); s != "" {
		parsed, err := strconv.Atoi(s)
		if err != nil || parsed <= 0 || parsed > oci.MaxManifestsPage {
			registryError(w, http.StatusBadRequest, "PAGINATION_NUMBER_INVALID", "n is a count from 1 to "+strconv.Itoa(oci.MaxManifestsPage))
			return
		}
		n = parsed
	}
	if _, err := reference.WithName(name); err != nil {
		registryError(w, http.StatusBadRequest, "NAME_INVALID", err.Error())
		return
	}
	newest, all, err := v.manifests(r, name)
	if err != nil {
		registryError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	last := r.URL.Query().Get("last")
	i := sort.Search(len(all), func(i int) bool { return all[i].Digest > last })
	page := oci.ManifestList{Manifests: all[i:min(len(all), i+n)], Newest: newest, More: i+n < len(all)}
	if page.Manifests == nil {
		page.Manifests = []oci.ManifestEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// manifests lists the manifests of repository name, sorted by digest, with when each was
// pushed (the time distribution wrote its link in the repository, which every push of it
// writes again), and when the repository was last pushed to: the newest of those times, of the
// pusher's last HEAD in it and of the registry's start.
func (v *inventory) manifests(r *http.Request, name string) (time.Time, []oci.ManifestEntry, error) {
	if _, err := reference.WithName(name); err != nil {
		return time.Time{}, nil, err
	}
	v.mu.Lock()
	newest := v.asked[name]
	for repo, at := range v.asked { // what is older than any grace is forgotten
		if time.Since(at) > 24*time.Hour {
			delete(v.asked, repo)
		}
	}
	v.mu.Unlock()
	if newest.Before(v.started) {
		newest = v.started
	}
	dir := path.Join("/docker/registry/v2/repositories", name, "_manifests/revisions/sha256")
	entries, err := v.driver.List(r.Context(), dir)
	if errors.As(err, &storagedriver.PathNotFoundError{}) {
		return newest.UTC(), nil, nil
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	out := make([]oci.ManifestEntry, 0, len(entries))
	for _, e := range entries {
		info, err := v.driver.Stat(r.Context(), path.Join(e, "link"))
		if errors.As(err, &storagedriver.PathNotFoundError{}) {
			continue // deleted
		}
		if err != nil {
			return time.Time{}, nil, err
		}
		out = append(out, oci.ManifestEntry{Digest: "sha256:" + path.Base(e), Pushed: info.ModTime().UTC()})
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	return newest.UTC(), out, nil
}
