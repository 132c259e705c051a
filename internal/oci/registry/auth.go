package registry

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	apiv2 "github.com/distribution/distribution/v3/registry/api/v2"
	"github.com/gorilla/mux"

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
	// rolePuller reads every repository: Kokumi's API server.
	rolePuller role = iota
	// rolePusher reads, writes, and deletes the manifests of namespaces' repositories: Kokumi's
	// controller.
	rolePusher
	// roleNamespacePuller reads the repositories of its namespace alone: Argo CD, and the
	// namespace's Pods that pull vendored images.
	roleNamespacePuller
	// roleNamespacePusher writes the repositories of its namespace alone, and reads those and
	// the repositories of no namespace (charts an admin pushed): Kokumi's controller rendering
	// an Order of the namespace.
	roleNamespacePusher
)

// isInventoryPath says whether path lists repositories (the catalog) or a repository's
// manifests: what only the collector of Kokumi's controller reads, signed in as the pusher.
func isInventoryPath(path string) bool {
	return path == oci.CatalogPath || (strings.HasPrefix(path, "/v2/") && strings.HasSuffix(path, oci.ManifestsSuffix))
}

// user is an identity signed in: its role, and for a namespace puller its namespace.
type user struct {
	role      role
	namespace string
}

func (u user) String() string {
	switch u.role {
	case rolePusher:
		return "the pusher"
	case roleNamespacePuller:
		return "the puller of namespace " + u.namespace
	case roleNamespacePusher:
		return "the pusher of namespace " + u.namespace
	}
	return "the puller"
}

// may says why u may not send a request of method to route, the route distribution gives it,
// of the repository name; "" lets it through. Every identity pings (/v2/); the pusher alone
// lists the catalog, which names every namespace's repositories (the controller's collector). The pusher and the puller read every
// repository (the controller reads the charts an admin pushed, the API server every
// namespace's records), a namespace puller only its namespace's (oci.OwnerOfRepository). The
// pusher alone writes; it deletes only manifests (the controller deletes the artifacts of the
// Preparations it collects) and only in a namespace's repositories. Blobs are deleted by
// nobody: the registry's garbage collection reclaims the ones no manifest references.
func (u user) may(method, route, name string) string {
	switch route {
	case apiv2.RouteNameBase:
		if method == http.MethodGet || method == http.MethodHead {
			return ""
		}
		return u.String() + " may not " + method + " /v2/"
	case apiv2.RouteNameCatalog:
		if u.role == rolePusher && (method == http.MethodGet || method == http.MethodHead) {
			return "" // the collector of Kokumi's controller
		}
		return "listing the repositories is refused: it would name every namespace's repositories; only Kokumi's controller, signed in as the pusher, lists them"
	}
	owner, owned := oci.OwnerOfRepository(name)
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case u.role == roleNamespacePuller && (!owned || owner != u.namespace):
			return u.String() + " reads only " + oci.ArtifactDir + "/" + u.namespace + "/… and " + oci.VendorDir + "/" + u.namespace + "/…, not " + name
		case u.role == roleNamespacePusher && owned && owner != u.namespace:
			return u.String() + " reads only its namespace's repositories and those of no namespace, not " + name + " of namespace " + owner
		}
		return ""
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		switch u.role {
		case rolePusher:
			return ""
		case roleNamespacePusher:
			if owned && owner == u.namespace {
				return ""
			}
			return u.String() + " writes only " + oci.ArtifactDir + "/" + u.namespace + "/… and " + oci.VendorDir + "/" + u.namespace + "/…, not " + name
		}
		return u.String() + " may not " + method + ": it only pulls"
	case http.MethodDelete:
		if u.role != rolePusher {
			return u.String() + " may not DELETE: only Kokumi's collector, signed in as the pusher, deletes manifests"
		}
		if !owned {
			return "the pusher deletes only in " + oci.ArtifactDir + "/<namespace>/… and " + oci.VendorDir + "/<namespace>/…, not in " + name
		}
		return ""
	}
	return u.String() + " may not " + method
}

// route names the route distribution gives r, and the repository it names (none for the ping
// and the catalog); ok is false when no route matches, or the path is not clean but for a
// trailing slash (distribution would redirect it to its clean form, which is then checked).
func route(r *http.Request) (routeName, repository string, ok bool) {
	if p, clean := r.URL.Path, path.Clean(r.URL.Path); p != clean && p != clean+"/" {
		return "", "", false
	}
	var m mux.RouteMatch
	if !apiv2.Router().Match(r, &m) || m.Route == nil || m.MatchErr != nil {
		return "", "", false
	}
	return m.Route.GetName(), m.Vars["name"], true
}

// stored is a stored identity, its name and password kept as SHA-256 digests: the passwords
// are random and long, and equal-length digests compare in constant time.
type stored struct {
	name, password [sha256.Size]byte
	role           role
}

// signIns are the identities the registry signs in: the stored ones, and the key of the
// namespace pullers' passwords (the pusher's password; oci.RegistryCredentials.NamespacePuller).
type signIns struct {
	users []stored
	creds oci.RegistryCredentials
}

// authorizer stands in front of distribution's handler: it signs users in (Basic) and lets
// each send the requests user.may allows. Without source (NoAuth) it lets anyone pull and
// push, and refuses DELETE: nobody is the pusher.
type authorizer struct {
	next   http.Handler
	source func() (oci.RegistryCredentials, error)
	now    func() time.Time

	mu     sync.Mutex
	signIn signIns
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
		registryError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required: sign in as Kokumi's pusher, its puller, or a namespace's puller or pusher")
		return
	}
	if isInventoryPath(r.URL.Path) && r.URL.Path != oci.CatalogPath {
		// A repository's manifests, with when each was pushed: the registry's own route, which
		// distribution's router does not know.
		if u.role != rolePusher || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			registryError(w, http.StatusForbidden, "DENIED", u.String()+" may not list a repository's manifests: only Kokumi's controller, signed in as the pusher, lists them")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), pusherKey{}, true))
		a.next.ServeHTTP(w, r)
		return
	}
	name, repository, ok := route(r)
	if !ok {
		registryError(w, http.StatusNotFound, "NOT_FOUND", "no such route of the registry API")
		return
	}
	if r.Method == http.MethodDelete && u.role == rolePusher && name != apiv2.RouteNameManifest {
		registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "deleting blobs and uploads is refused: the registry's garbage collection reclaims the blobs no manifest references")
		return
	}
	if why := u.may(r.Method, name, repository); why != "" {
		registryError(w, http.StatusForbidden, "DENIED", why)
		return
	}
	if from := r.URL.Query().Get("from"); from != "" && r.Method == http.MethodPost {
		// A blob mounted from another repository is read there: the same rule as a pull.
		if why := u.may(http.MethodGet, apiv2.RouteNameBlob, from); why != "" {
			registryError(w, http.StatusForbidden, "DENIED", "mounting a blob from "+from+": "+why)
			return
		}
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
	if u, ok := a.current(false).match(name, password); ok {
		return u, true
	}
	return a.current(true).match(name, password)
}

// match finds the user of a name and password: a namespace puller by its derived password,
// a stored identity by comparing with every one in constant time.
func (s signIns) match(name, password string) (user, bool) {
	p := sha256.Sum256([]byte(password))
	for _, d := range []struct {
		of   func(string) (string, bool)
		cred func(string) oci.Credential
		role role
	}{
		{oci.NamespaceOfPuller, s.creds.NamespacePuller, roleNamespacePuller},
		{oci.NamespaceOfPusher, s.creds.NamespacePusher, roleNamespacePusher},
	} {
		namespace, ok := d.of(name)
		if !ok {
			continue
		}
		if s.creds.Pusher.Password == "" {
			return user{}, false // no key read yet: no namespace identity signs in
		}
		want := sha256.Sum256([]byte(d.cred(namespace).Password))
		if subtle.ConstantTimeCompare(p[:], want[:]) == 1 {
			return user{role: d.role, namespace: namespace}, true
		}
		return user{}, false
	}
	n := sha256.Sum256([]byte(name))
	var found user
	ok := 0
	for _, u := range s.users {
		eq := subtle.ConstantTimeCompare(n[:], u.name[:]) & subtle.ConstantTimeCompare(p[:], u.password[:])
		if eq == 1 {
			found = user{role: u.role}
		}
		ok |= eq
	}
	return found, ok == 1
}

// current returns the identities, read again when they are older than credentialsMaxAge or,
// with retry, older than credentialsRetry. When reading fails the last ones stay.
func (a *authorizer) current(retry bool) signIns {
	a.mu.Lock()
	defer a.mu.Unlock()
	age := a.now().Sub(a.loaded)
	if a.loaded.IsZero() || age >= credentialsMaxAge || (retry && age >= credentialsRetry) {
		a.loaded = a.now()
		c, err := a.source()
		if err != nil {
			log.Printf("kokumi registry: %v; the credentials read before stay", err)
			return a.signIn
		}
		a.signIn = signIns{creds: c, users: []stored{
			{name: sha256.Sum256([]byte(c.Pusher.Username)), password: sha256.Sum256([]byte(c.Pusher.Password)), role: rolePusher},
			{name: sha256.Sum256([]byte(c.Puller.Username)), password: sha256.Sum256([]byte(c.Puller.Password)), role: rolePuller},
		}}
	}
	return a.signIn
}

// registryError writes an error in the registry API's format.
func registryError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}
