package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// The server asks RBAC what a signed-in person may read, and writes as that person, with their
// own token (held in memory for their session): the API server authenticates and authorizes
// every write itself, and the server holds no impersonation grant.
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

const (
	// accessTTL is how long an answer of RBAC is reused for the same person and question.
	accessTTL = 30 * time.Second
	// maxAccess caps the answers kept.
	maxAccess = 16384
)

// deliveryGroup is the API group of Kokumi's kinds.
var deliveryGroup = v1.GroupVersion.Group

// access is one question to RBAC: may a person do verb on resource (of group) in namespace
// (cluster-wide, or every namespace, when empty), on the object name (any, when empty)?
type access struct {
	verb, group, resource, namespace, name string
}

// String says it as `kubectl auth can-i` takes it.
func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += "/" + a.name
	}
	if a.namespace == "" {
		return s + " --all-namespaces"
	}
	return s + " -n " + a.namespace
}

// authorizer answers accesses with SubjectAccessReviews, and keeps the answers for accessTTL.
type authorizer struct {
	client  client.Client
	answers *ttlCache[string, bool]
}

func newAuthorizer(c client.Client) *authorizer {
	return &authorizer{client: c, answers: newTTLCache[string, bool](maxAccess)}
}

// allowed asks RBAC whether id may do a. The admin may read everything the server shows, and
// write what the server's own identity may (a SelfSubjectAccessReview of it): the admin
// token writes as the server, whose shipped role holds no approve, so that approvals come from
// people.
func (z *authorizer) allowed(ctx context.Context, id Identity, a access) (bool, error) {
	if id.Admin && readVerbs[a.verb] {
		return true, nil
	}
	if id.Admin {
		return z.serverMay(ctx, a)
	}
	if id.User.Username == "" {
		return false, nil
	}
	key := id.key() + "\x00" + a.String()
	if ok, found := z.answers.get(key); found {
		return ok, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range id.User.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.User.Username, UID: id.User.UID, Groups: id.User.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name,
		},
	}}
	if err := z.client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("ask RBAC whether %s may %s: %w", id.User.Username, a, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	z.answers.put(key, ok, z.answers.now().Add(accessTTL))
	return ok, nil
}

// readVerbs are the verbs that read.
var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// serverMay asks RBAC whether the server's own identity may do a.
func (z *authorizer) serverMay(ctx context.Context, a access) (bool, error) {
	key := "\x00server\x00" + a.String()
	if ok, found := z.answers.get(key); found {
		return ok, nil
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name,
		},
	}}
	if err := z.client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("ask RBAC whether the server may %s: %w", a, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	z.answers.put(key, ok, z.answers.now().Add(accessTTL))
	return ok, nil
}

// key identifies the person: everything RBAC may look at.
func (id Identity) key() string {
	groups := append([]string(nil), id.User.Groups...)
	sort.Strings(groups)
	data, _ := json.Marshal([]any{id.User.Username, id.User.UID, groups, id.User.Extra}) // maps marshal sorted
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// may asks RBAC whether the request's person may do every one of as.
func (s *Server) may(ctx context.Context, as ...access) (bool, error) {
	id := identityOf(ctx)
	for _, a := range as {
		ok, err := s.authz.allowed(ctx, id, a)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// authorize answers 403 (or 503 when RBAC cannot be asked) unless the request's person may do
// a, and reports whether they may.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, a access) bool {
	ok, err := s.may(r.Context(), a)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return false
	}
	if !ok {
		writeError(w, http.StatusForbidden, deniedMessage(identityOf(r.Context()).User.Username, a))
	}
	return ok
}

// listableIn returns whether the request's person may list resource (of group) in a namespace:
// everywhere when RBAC lets them list it in every namespace, else namespace by namespace.
func (s *Server) listableIn(ctx context.Context, group, resource string) func(namespace string) (bool, error) {
	memo := map[string]bool{}
	return func(namespace string) (bool, error) {
		if ok, found := memo[namespace]; found {
			return ok, nil
		}
		ok, err := s.may(ctx, access{verb: "list", group: group, resource: resource})
		if err == nil && !ok && namespace != "" {
			ok, err = s.may(ctx, access{verb: "list", group: group, resource: resource, namespace: namespace})
		}
		if err != nil {
			return false, err
		}
		memo[namespace] = ok
		return ok, nil
	}
}

// keepListable keeps the items whose namespace the request's person may list resource in.
func keepListable[T any](s *Server, ctx context.Context, group, resource string, items []T, namespaceOf func(*T) string) ([]T, error) {
	listable := s.listableIn(ctx, group, resource)
	kept := items[:0]
	for i := range items {
		ok, err := listable(namespaceOf(&items[i]))
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, items[i])
		}
	}
	return kept, nil
}

// changeResources are the resources whose list the changes of a kind need.
var changeResources = map[string]struct{ group, resource string }{
	"Serving":     {deliveryGroup, "servings"},
	"Cluster":     {deliveryGroup, "clusters"},
	"Order":       {deliveryGroup, "orders"},
	"Environment": {deliveryGroup, "environments"},
	"Preparation": {deliveryGroup, "preparations"},
	"Application": {argocd.ApplicationGVK.Group, "applications"},
}

// maySee reports whether the request's person may list the kind of c in its namespace (or
// cluster-wide, for a Cluster): the event stream tells nobody of what they may not read.
func (s *Server) maySee(ctx context.Context, c Change) (bool, error) {
	r, ok := changeResources[c.Kind]
	if !ok {
		return false, nil
	}
	return s.listableIn(ctx, r.group, r.resource)(c.Namespace)
}

// clientFor returns a client that acts as the request's person: the server's own for the
// admin, else one that sends the person's own token and nothing of the server's credentials,
// so that the API server authenticates and authorizes the request as theirs.
func (s *Server) clientFor(ctx context.Context) (client.Client, error) {
	id := identityOf(ctx)
	if id.Admin {
		return s.client, nil
	}
	if id.User.Username == "" || id.token == "" {
		return nil, errors.New("act as nobody: the request is not signed in")
	}
	cfg := rest.AnonymousClientConfig(s.config)
	cfg.BearerToken = id.token
	c, err := client.New(cfg, client.Options{Scheme: s.client.Scheme(), Mapper: s.client.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("act as %s: %w", id.User.Username, err)
	}
	return c, nil
}
