package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// Pin is one image: the reference the manifests named, and the reference by digest that
// replaces it.
type Pin struct {
	// Original is the reference as written.
	Original string
	// Pinned is the reference by digest.
	Pinned string
}

// Error says which image failed and why.
type Error struct {
	// Image is the reference as written in the manifests.
	Image string
	// Err is what the registry answered.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("image %s: %v", e.Image, e.Err) }

// Unwrap returns the registry's error.
func (e *Error) Unwrap() error { return e.Err }

// VendorDir is the top directory of the images vendored for a namespace:
// <vendor registry>/vendor/<namespace>/<source host>/<path>@<digest>.
const VendorDir = oci.VendorDir

// Resolver reaches the registries images live in.
type Resolver struct {
	// Credentials sign in to registries; other hosts are reached anonymously.
	Credentials oci.Credentials
	// Namespace, when set, is the namespace images are vendored for: under
	// VendorDir/<Namespace>/ of the vendor registry, so that no two namespaces share a copy.
	Namespace string
	// Allow, when set, is asked for the repository (host/path) of every image read and every
	// copy written; its error refuses the image.
	Allow func(repository string) error
	// PlainHTTP lists hosts reached over plain HTTP besides loopback ones.
	PlainHTTP []string
	// Transport sends the requests; nil means remote.DefaultTransport bounded by ResponseTimeout.
	Transport http.RoundTripper
	// Parallel is how many images are resolved at once (default 4).
	Parallel int
	// Tags, when set, keeps for a few seconds what each tag pointed to, for these Credentials
	// only, so that the Orders rendering at the same time resolve each tag once (TagCache).
	// Images vendored are copied all the same.
	Tags *TagCache
}

// Resolve pins refs to their digests (vendorRegistry empty) or copies them, every platform
// of an index, into vendorRegistry and points them there. It returns one Pin per ref, in the
// order of refs; the first failure in that order is returned as an *Error.
func (r *Resolver) Resolve(ctx context.Context, refs []string, vendorRegistry string) ([]Pin, error) {
	pins := make([]Pin, len(refs))
	errs := make([]error, len(refs))
	parallel := r.Parallel
	if parallel <= 0 {
		parallel = 4
	}
	// Each result goes to its place: the first failure in refs' order is returned, not the first
	// in time, and one failure does not stop the others.
	var g errgroup.Group
	g.SetLimit(parallel)
	for i, ref := range refs {
		g.Go(func() error {
			var pinned string
			var err error
			if vendorRegistry == "" {
				pinned, err = r.pin(ctx, ref)
			} else {
				pinned, err = r.vendor(ctx, ref, vendorRegistry)
			}
			if err != nil {
				errs[i] = &Error{Image: ref, Err: err}
				return nil
			}
			pins[i] = Pin{Original: ref, Pinned: pinned}
			return nil
		})
	}
	_ = g.Wait() // every Go returns nil: the failures are in errs
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pins, nil
}

func (r *Resolver) parse(ref string) (name.Reference, error) {
	var opts []name.Option
	if r.plainHTTP(ref) {
		opts = append(opts, name.Insecure)
	}
	parsed, err := parseImage(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("parse reference: %w", err)
	}
	return parsed, nil
}

// parseImage parses ref as Kokumi pins it: a reference that would not parse once pinned to a
// digest (a repository too long once Docker Hub's library/ is added to it) is refused here,
// rather than rewritten into a manifest no cluster could read.
func parseImage(ref string, opts ...name.Option) (name.Reference, error) {
	parsed, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, err
	}
	if _, err := name.NewDigest(pinnedRef(ref, "sha256:"+strings.Repeat("0", 64)), opts...); err != nil {
		return nil, fmt.Errorf("%q is not a valid reference once pinned to a digest: %w", ref, err)
	}
	return parsed, nil
}

func (r *Resolver) plainHTTP(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	for _, h := range r.PlainHTTP {
		if h == host {
			return true
		}
	}
	return false
}

// ResponseTimeout bounds the wait for a registry's answer to one request (oci.ResponseTimeout):
// a registry that accepts connections and never answers fails the image (after
// go-containerregistry's three tries, in about a minute) instead of holding the render.
const ResponseTimeout = oci.ResponseTimeout

// defaultTransport is go-containerregistry's default transport, bounded by ResponseTimeout.
var defaultTransport = func() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = ResponseTimeout
	return t
}()

func (r *Resolver) options(ctx context.Context) []remote.Option {
	transport := r.Transport
	if transport == nil {
		transport = defaultTransport
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(oci.Keychain{Credentials: r.Credentials}), remote.WithTransport(transport)}
}

// pin resolves a tag to the digest it points to now; a reference by digest is kept as is.
func (r *Resolver) pin(ctx context.Context, ref string) (string, error) {
	parsed, err := r.parse(ref)
	if err != nil {
		return "", err
	}
	if err := r.allow(parsed.Context()); err != nil {
		return "", err
	}
	if _, ok := parsed.(name.Digest); ok {
		return ref, nil
	}
	head := func() (string, error) {
		desc, err := remote.Head(parsed, r.options(ctx)...)
		if err != nil {
			return "", fmt.Errorf("resolve tag: %w", err)
		}
		return desc.Digest.String(), nil
	}
	var digest string
	if r.Tags != nil {
		// After Allow: the cache answers only what this resolver may read, with its credentials.
		identity := credentialIdentity(r.Credentials, parsed.Context().RegistryStr())
		digest, err = r.Tags.resolve(identity, parsed.Name(), head)
	} else {
		digest, err = head()
	}
	if err != nil {
		return "", err
	}
	return pinnedRef(ref, digest), nil
}

// pinnedRef is ref, as written, pointed at digest: its tag (or digest) replaced.
func pinnedRef(ref, digest string) string {
	return withoutTag(ref) + "@" + digest
}

// allow asks Allow about a repository.
func (r *Resolver) allow(repo name.Repository) error {
	if r.Allow == nil {
		return nil
	}
	return r.Allow(repo.RegistryStr() + "/" + repo.RepositoryStr())
}

// vendor copies the image (every platform of an index) to
// registry/[VendorDir/<Namespace>/]<source host>/<path>, by digest only, and returns the
// copy's reference by digest.
func (r *Resolver) vendor(ctx context.Context, ref, registry string) (string, error) {
	src, err := r.parse(ref)
	if err != nil {
		return "", err
	}
	if err := r.allow(src.Context()); err != nil {
		return "", err
	}
	opts := r.options(ctx)
	desc, err := remote.Get(src, opts...)
	if err != nil {
		return "", fmt.Errorf("fetch: %w", err)
	}
	dstRepoName := vendorRepository(registry, r.Namespace, src.Context())
	var dstOpts []name.Option
	if r.plainHTTP(dstRepoName) {
		dstOpts = append(dstOpts, name.Insecure)
	}
	dstRepo, err := name.NewRepository(dstRepoName, dstOpts...)
	if err != nil {
		return "", fmt.Errorf("vendor repository %s: %w", dstRepoName, err)
	}
	if err := r.allow(dstRepo); err != nil {
		return "", err
	}
	// By digest only: a tag would be a name another render could move.
	dst := dstRepo.Digest(desc.Digest.String())
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return "", fmt.Errorf("read index: %w", err)
		}
		if err := remote.WriteIndex(dst, idx, opts...); err != nil {
			return "", fmt.Errorf("copy to %s: %w", dstRepoName, err)
		}
	} else {
		img, err := desc.Image()
		if err != nil {
			return "", fmt.Errorf("read image: %w", err)
		}
		if err := remote.Write(dst, img, opts...); err != nil {
			return "", fmt.Errorf("copy to %s: %w", dstRepoName, err)
		}
	}
	return dstRepoName + "@" + desc.Digest.String(), nil
}

// maxRepository is the longest repository name (without the registry) registries accept.
const maxRepository = 255

// vendorRepository is where an image of src is vendored into registry:
// registry/[VendorDir/<namespace>/]<source host>/<path>. A path too long for a repository
// name is cut, and a hash of the source's name keeps it apart from others.
func vendorRepository(registry, namespace string, src name.Repository) string {
	prefix := ""
	if namespace != "" {
		prefix = VendorDir + "/" + namespace + "/"
	}
	path := hostComponent(src.RegistryStr()) + "/" + src.RepositoryStr()
	if len(prefix)+len(path) > maxRepository {
		sum := sha256.Sum256([]byte(src.Name()))
		suffix := "-" + hex.EncodeToString(sum[:])[:12]
		path = strings.TrimRight(path[:maxRepository-len(prefix)-len(suffix)], "./_-") + suffix
	}
	return registry + "/" + prefix + path
}

// hostComponent turns a registry's host[:port] into one component of a repository path, as
// the OCI distribution spec has them: lower case (host names are not case-sensitive), the
// dots of the name kept, and any other run of characters (the ":" of a port, the brackets
// and colons of an IPv6 address) one "-"; 127.0.0.1:5000 becomes 127.0.0.1-5000.
func hostComponent(host string) string {
	var b strings.Builder
	separators := ""
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			switch {
			case b.Len() == 0:
			case separators == ".":
				b.WriteByte('.')
			case separators != "":
				b.WriteByte('-')
			}
			separators = ""
			b.WriteRune(r)
			continue
		}
		separators += string(r)
	}
	if b.Len() == 0 {
		return "registry"
	}
	return b.String()
}

// withoutTag strips the tag (and any digest) from a reference as written.
func withoutTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

// Registry is the registry (host[:port]) an image reference pulls from, as a container runtime
// reads it: Docker Hub's (docker.io) for a reference that names none. A reference that does not parse is
// returned whole: no allow-list names it.
func Registry(ref string) string {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return ref
	}
	if r := parsed.Context().RegistryStr(); r != name.DefaultRegistry {
		return r
	}
	return "docker.io" // as people name Docker Hub
}
