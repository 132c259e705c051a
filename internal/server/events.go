package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// Change tells the UI that an object it may show changed; the UI fetches again what it shows.
// An Application's change names its Serving and cluster.
type Change struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Cluster   string `json:"cluster,omitempty"`
}

// subscriberBuffer is how many changes wait for a slow client before it is told to resync.
const subscriberBuffer = 256

// heartbeat keeps idle event streams open through proxies.
const heartbeat = 25 * time.Second

type subscriber struct {
	ch       chan Change
	kick     chan struct{}
	overflow atomic.Bool
	// key is the session (or bearer token) the stream belongs to, owner the identity; done
	// closes when it ends.
	key, owner string
	done       chan struct{}
}

// broker fans changes out to the open event streams. A client that falls behind loses the
// changes it missed and gets one "resync" event instead, so a busy fleet never blocks the
// informers. It knows the streams of each session, to cap them and end them at logout.
type broker struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	byKey   map[string]map[*subscriber]struct{}
	byOwner map[string]int
}

func newBroker() *broker {
	return &broker{subs: map[*subscriber]struct{}{}, byKey: map[string]map[*subscriber]struct{}{}, byOwner: map[string]int{}}
}

// streamLimits caps the event streams of a session or bearer token, of an identity, and in all
// (<= 0: no cap).
type streamLimits struct{ perKey, perOwner, total int }

// errStreams says which cap refused a stream.
type errStreams string

// subscribe opens a stream for key (a session, a bearer token) of owner (an identity), unless a
// cap of limits is reached: then it says which.
func (b *broker) subscribe(key, owner string, limits streamLimits) (*subscriber, errStreams) {
	s := &subscriber{ch: make(chan Change, subscriberBuffer), kick: make(chan struct{}, 1), key: key, owner: owner, done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case limits.perKey > 0 && len(b.byKey[key]) >= limits.perKey:
		return nil, errStreams(fmt.Sprintf("this session has %d event streams open already: close one", limits.perKey))
	case limits.perOwner > 0 && b.byOwner[owner] >= limits.perOwner:
		return nil, errStreams(fmt.Sprintf("your identity has %d event streams open already, across its sessions: close one", limits.perOwner))
	case limits.total > 0 && len(b.subs) >= limits.total:
		return nil, errStreams(fmt.Sprintf("the server holds its maximum of %d event streams: try again in a moment (the page still works without live updates)", limits.total))
	}
	b.byOwner[owner]++
	b.subs[s] = struct{}{}
	if b.byKey[key] == nil {
		b.byKey[key] = map[*subscriber]struct{}{}
	}
	b.byKey[key][s] = struct{}{}
	return s, ""
}

func (b *broker) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		b.release(s)
	}
	delete(b.subs, s)
	if m := b.byKey[s.key]; m != nil {
		if _, ok := m[s]; ok {
			delete(m, s)
			if len(m) == 0 {
				delete(b.byKey, s.key)
			}
		}
	}
}

// end ends every stream of key at once.
func (b *broker) end(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.byKey[key] {
		if _, ok := b.subs[s]; ok {
			b.release(s)
		}
		delete(b.subs, s)
		close(s.done)
	}
	delete(b.byKey, key)
}

// release forgets s's count against its owner; b.mu is held.
func (b *broker) release(s *subscriber) {
	if b.byOwner[s.owner]--; b.byOwner[s.owner] <= 0 {
		delete(b.byOwner, s.owner)
	}
}

// sessionStream is the key of a session's event streams.
func sessionStream(sid string) string { return "session:" + sid }

// streamLive reports whether the session of a stream's key is still open (a bearer token's
// stream lives as long as its connection).
func (s *Server) streamLive(key string) bool {
	sid, ok := strings.CutPrefix(key, "session:")
	if !ok {
		return true
	}
	_, live, err := s.auth.session(context.Background(), sid)
	return live || err != nil // the API server may be down for a moment: the stream goes on
}

// streamKeyOf is the key of r's event streams: its bearer token's SHA-256, or its session.
func streamKeyOf(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		sum := sha256.Sum256([]byte(strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))))
		return "bearer:" + hex.EncodeToString(sum[:])
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return sessionStream(c.Value)
	}
	return ""
}

func (b *broker) publish(c Change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- c:
		default:
			s.overflow.Store(true)
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

// watch publishes a Change for every add, update and delete the cache sees of Kokumi's kinds
// the UI shows; Argo CD's Applications are watched from their own cache (AddToManager).
func (s *Server) watch(ctx context.Context, informers cache.Informers) error {
	for _, w := range []struct {
		kind string
		obj  client.Object
	}{
		{"Serving", &v1.Serving{}}, {"Cluster", &v1.Cluster{}}, {"Order", &v1.Order{}},
		{"Environment", &v1.Environment{}}, {"Preparation", &v1.Preparation{}},
	} {
		if err := s.publishChanges(ctx, informers, w.kind, w.obj); err != nil {
			return err
		}
	}
	return nil
}

// publishChanges publishes a Change for every add, update and delete informers see of obj's kind.
func (s *Server) publishChanges(ctx context.Context, informers cache.Informers, kind string, obj client.Object) error {
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kind, err)
	}
	on := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		o, ok := obj.(client.Object)
		if !ok {
			return
		}
		for _, c := range changesOf(kind, o) {
			s.broker.publish(c)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    on,
		UpdateFunc: func(_, obj any) { on(obj) },
		DeleteFunc: on,
	}); err != nil {
		return fmt.Errorf("watch %s: %w", kind, err)
	}
	return nil
}

// changesOf says what a change of o changes: o itself; for one of Kokumi's Applications, its
// Serving and cluster instead; for a Preparation (a new deployment record, say), also the
// Serving of its Order, which has the Order's name.
func changesOf(kind string, o client.Object) []Change {
	self := Change{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName()}
	switch obj := o.(type) {
	case *v1.Preparation:
		return []Change{self, {Kind: "Serving", Namespace: obj.Namespace, Name: obj.Spec.OrderRef.Name}}
	case *argocd.Application:
		if l := obj.GetLabels(); l[argocd.LabelServing] != "" {
			return []Change{{Kind: "Serving", Namespace: l[argocd.LabelServingNamespace], Name: l[argocd.LabelServing], Cluster: l[argocd.LabelCluster]}}
		}
	}
	return []Change{self}
}

// events streams changes as server-sent events: "change" with a Change as data, "resync" when
// the client fell behind and should fetch everything it shows again. A change is sent only to a
// person who may list its kind in its namespace (maySee); when RBAC cannot be asked, it is not
// sent.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	key := streamKeyOf(r)
	sub, refused := s.broker.subscribe(key, identityOf(r.Context()).key(), streamLimits{
		perKey: s.opts.MaxStreamsPerSession, perOwner: s.opts.MaxStreamsPerIdentity, total: s.opts.MaxStreams})
	if sub == nil {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, string(refused))
		return
	}
	defer s.broker.unsubscribe(sub)
	if !s.streamLive(key) {
		writeError(w, http.StatusUnauthorized, "the session has ended: log in again")
		return
	}
	// The stream outlives the server's read and write timeouts: it is read nothing more, and
	// each write gets WriteTimeout of its own, so a client that stops reading is still dropped.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	extend := func() {
		if s.opts.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	extend()
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 3000\n: connected\n\n")
	flusher.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.done:
			return // logged out
		case <-tick.C:
			if !s.streamLive(key) {
				return // the session expired
			}
			extend()
			fmt.Fprint(w, ": heartbeat\n\n")
		case <-sub.kick:
			if sub.overflow.Swap(false) {
				for len(sub.ch) > 0 {
					<-sub.ch
				}
				extend()
				fmt.Fprint(w, "event: resync\ndata: {}\n\n")
			}
		case c := <-sub.ch:
			if ok, err := s.maySee(r.Context(), c); err != nil || !ok {
				if err != nil {
					logf.FromContext(r.Context()).Error(err, "an event is not sent", "kind", c.Kind, "namespace", c.Namespace)
				}
				continue
			}
			data, err := json.Marshal(c)
			if err != nil {
				continue
			}
			extend()
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", data)
		}
		flusher.Flush()
	}
}
