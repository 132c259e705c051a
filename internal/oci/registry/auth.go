package registry

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// RegistryRealm is the realm of the bundled registry's Basic challenge.
const RegistryRealm = "kokumi-registry"

// HealthPath answers 200 without authentication, for the kubelet's probes; it reads nothing.
const HealthPath = "/healthz"

const (
	// credentialsMaxAge is how long the registry keeps credentials before it reads them again.
	credentialsMaxAge = 30 * time.Second
	// credentialsRetry is how soon after the last read a failed sign-in reads them again, so
	// that new credentials take effect at once and wrong ones cannot make it read often.
	credentialsRetry = time.Second
)

// role is what an identity may do.
type role int

const (
	rolePuller role = iota
	rolePusher
)

// may says whether the role may send a request of method to path: both pull, the pusher
// alone pushes and deletes manifests (Kokumi's controller deletes the artifacts of the
// Preparations it collects and the manifests nothing names) and lists the repositories and
// their manifests. Blobs are deleted by nobody: the registry's garbage collection reclaims the
// ones no manifest references.
func (r role) may(method, path string) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return !isInventoryPath(path) || r == rolePusher
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return r == rolePusher
	case http.MethodDelete:
		return r == rolePusher && isManifestPath(path)
	}
	return false
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

// isInventoryPath says whether path lists repositories (the catalog) or a repository's
// manifests: what only the collector of Kokumi's controller reads.
func isInventoryPath(path string) bool {
	return path == oci.CatalogPath || (strings.HasPrefix(path, "/v2/") && strings.HasSuffix(path, oci.ManifestsSuffix))
}

func (r role) String() string {
	if r == rolePusher {
		return "the pusher"
	}
	return "the puller"
}

// user is an identity, its name and password kept as SHA-256 digests: the passwords are
// random and long, and equal-length digests compare in constant time.
type user struct {
	name, password [sha256.Size]byte
	role           role
}

// authorizer stands in front of distribution's handler: it signs users in (Basic), lets the
// pusher pull, push and delete manifests and the puller only pull. Without source (NoAuth)
// it lets anyone pull and push, and refuses DELETE: nobody is the pusher.
type authorizer struct {
	next   http.Handler
	source func() (oci.RegistryCredentials, error)
	now    func() time.Time

	mu     sync.Mutex
	users  []user
	loaded time.Time
}

// ServeHTTP implements http.Handler.
func (a *authorizer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == HealthPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if a.source == nil {
		if r.Method == http.MethodDelete {
			registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "deleting is refused without authentication: only Kokumi's controller, signed in as the pusher, deletes manifests")
			return
		}
		if isInventoryPath(r.URL.Path) {
			registryError(w, http.StatusForbidden, "DENIED", "listing repositories and manifests is refused without authentication: only Kokumi's controller, signed in as the pusher, lists them")
			return
		}
		a.next.ServeHTTP(w, r)
		return
	}
	u, ok := a.authenticate(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+RegistryRealm+`"`)
		registryError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required: sign in as Kokumi's pusher or puller")
		return
	}
	if r.Method == http.MethodDelete && u.role == rolePusher && !isManifestPath(r.URL.Path) {
		registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "deleting blobs and uploads is refused: the registry's garbage collection reclaims the blobs no manifest references")
		return
	}
	if !u.role.may(r.Method, r.URL.Path) {
		registryError(w, http.StatusForbidden, "DENIED", u.role.String()+" may not "+r.Method+" "+r.URL.Path+": the puller only pulls, and lists neither repositories nor manifests")
		return
	}
	if u.role == rolePusher {
		r = r.WithContext(context.WithValue(r.Context(), pusherKey{}, true))
	}
	a.next.ServeHTTP(w, r)
}

// authenticate signs the request's Basic credentials in. A failed sign-in reads the
// credentials again (at most once per credentialsRetry) and tries once more.
func (a *authorizer) authenticate(r *http.Request) (user, bool) {
	name, password, ok := r.BasicAuth()
	if !ok {
		return user{}, false
	}
	n, p := sha256.Sum256([]byte(name)), sha256.Sum256([]byte(password))
	if u, ok := match(a.current(false), n, p); ok {
		return u, true
	}
	return match(a.current(true), n, p)
}

// match finds the user of a name and password, comparing with every user in constant time.
func match(users []user, name, password [sha256.Size]byte) (user, bool) {
	var found user
	ok := 0
	for _, u := range users {
		eq := subtle.ConstantTimeCompare(name[:], u.name[:]) & subtle.ConstantTimeCompare(password[:], u.password[:])
		if eq == 1 {
			found = u
		}
		ok |= eq
	}
	return found, ok == 1
}

// current returns the users, read again when they are older than credentialsMaxAge or, with
// retry, older than credentialsRetry. When reading fails the last users stay.
func (a *authorizer) current(retry bool) []user {
	a.mu.Lock()
	defer a.mu.Unlock()
	age := a.now().Sub(a.loaded)
	if a.loaded.IsZero() || age >= credentialsMaxAge || (retry && age >= credentialsRetry) {
		a.loaded = a.now()
		c, err := a.source()
		if err != nil {
			log.Printf("kokumi registry: %v; the credentials read before stay", err)
			return a.users
		}
		a.users = []user{
			{name: sha256.Sum256([]byte(c.Pusher.Username)), password: sha256.Sum256([]byte(c.Pusher.Password)), role: rolePusher},
			{name: sha256.Sum256([]byte(c.Puller.Username)), password: sha256.Sum256([]byte(c.Puller.Password)), role: rolePuller},
		}
	}
	return a.users
}

// registryError writes an error in the registry API's format.
func registryError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}
