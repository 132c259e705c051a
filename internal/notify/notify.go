// Package notify tells an Environment's webhooks (spec.notifications) of the roll-out
// transitions of its Servings. The Serving reconciler hands each transition to a Notifier, which
// never blocks it: a bounded queue (a delivery that finds it full is dropped and counted), a few
// sender goroutines that run with the manager, and retries with exponential backoff on a network
// error, a 5xx or a 429. Deliveries carry the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature): when the webhook names a key (secretRef, a Secret of
// Kokumi's own namespace, read at send time), the signature covers the id, the timestamp and the
// body; a delivery whose key is missing or malformed is never sent unsigned.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/egress"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/version"
)

// The headers of a delivery, besides Content-Type and User-Agent: those of Standard Webhooks
// (https://www.standardwebhooks.com).
const (
	// IDHeader carries the delivery's id (DeliveryID): the same on every try of one transition
	// to one webhook, and on the transition seen again by a reconcile whose status write was
	// lost, so that a receiver can drop a repeat.
	IDHeader = "webhook-id"
	// TimestampHeader carries when this try was sent, in Unix seconds: a receiver refuses a
	// delivery whose timestamp is further than Tolerance from its clock.
	TimestampHeader = "webhook-timestamp"
	// SignatureHeader carries v1,<base64 HMAC-SHA256 of "id.timestamp.body"> (Sign), keyed with
	// the webhook's key (ParseKey); absent when the webhook names no key.
	SignatureHeader = "webhook-signature"
)

// Tolerance is how far from a receiver's clock a delivery's webhook-timestamp may be for the
// documented verification (docs/rollouts.md) to accept it: Standard Webhooks' five minutes. A
// receiver remembers the ids it accepted for as long, and drops a repeat.
const Tolerance = 5 * time.Minute

// KeyPrefix starts the value of a webhook's key: whsec_ and the base64 of the key's bytes, as
// Standard Webhooks' libraries take it.
const KeyPrefix = "whsec_"

// MinKeyBytes is the fewest bytes a webhook's key decodes to (Standard Webhooks asks for 24 to
// 64 random bytes).
const MinKeyBytes = 24

// ReasonNotificationFailed is the reason of the Warning Event on an Environment whose webhook a
// delivery was given up to.
const ReasonNotificationFailed = "NotificationFailed"

// Defaults of Options.
const (
	DefaultQueue         = 256
	DefaultSenders       = 4
	DefaultTries         = 6
	DefaultFirstBackoff  = time.Second
	DefaultMaxRetryAfter = time.Minute
	DefaultTimeout       = 10 * time.Second
)

// maxResponse is how much of a webhook's answer is read: a few KiB, of which the start goes in
// the message of a failure.
const maxResponse = 4 << 10

// Options configure a Notifier; zero values take the defaults.
type Options struct {
	// Secrets reads the Secrets that hold the webhooks' keys, at send time, by name (the
	// manager's API reader: no cache, no watch of Secrets).
	Secrets client.Reader
	// Namespace is Kokumi's own namespace, where every webhook's secretRef is read: the tenants
	// of an Environment's namespace can neither read nor delete its keys there.
	Namespace string
	// Recorder records a Warning Event on the Environment of a delivery given up; nil records
	// none.
	Recorder events.EventRecorder
	// Queue is how many deliveries wait at most; one more is dropped.
	Queue int
	// Senders is how many deliveries are made at once.
	Senders int
	// Tries is how many times a delivery is tried before it fails.
	Tries int
	// FirstBackoff is the wait before the second try; it doubles before each next one.
	FirstBackoff time.Duration
	// MaxRetryAfter caps the wait a webhook's Retry-After asks for.
	MaxRetryAfter time.Duration
	// Timeout bounds each request.
	Timeout time.Duration
	// Client makes the requests; nil is one that follows no redirect (the signature would go to
	// another URL than the Environment names).
	Client *http.Client
	// Now stamps the bodies.
	Now func() time.Time
}

// rememberedDeliveries is how many delivery ids a Notifier remembers, to drop a repeat of a
// transition it already queued (a reconcile whose status write was lost sees it again): a few
// hundred KiB at most.
const rememberedDeliveries = 4096

// Notifier delivers roll-out transitions to the Environments' webhooks. Notify queues; Start,
// run by the manager, sends.
type Notifier struct {
	opts  Options
	queue chan *delivery

	mu sync.Mutex
	// seen holds the ids of the last rememberedDeliveries deliveries queued; order is a ring of
	// them, oldest at next.
	seen  map[string]struct{}
	order []string
	next  int
}

// delivery is one transition to one webhook, with its tries so far.
type delivery struct {
	id string
	// env is the Environment: its name, namespace and uid (the Event's object).
	env   *v1.Environment
	index int
	hook  v1.Notification
	event v1.NotificationEvent
	// contentType is the body's media type, of the webhook's format.
	contentType string
	body        []byte
	tries       int
}

// New returns a Notifier of opts, its queue ready to take deliveries before it starts.
func New(opts Options) *Notifier {
	config.OrDefault(&opts.Queue, DefaultQueue)
	config.OrDefault(&opts.Senders, DefaultSenders)
	config.OrDefault(&opts.Tries, DefaultTries)
	config.OrDefault(&opts.FirstBackoff, DefaultFirstBackoff)
	config.OrDefault(&opts.MaxRetryAfter, DefaultMaxRetryAfter)
	config.OrDefault(&opts.Timeout, DefaultTimeout)
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Notifier{opts: opts, queue: make(chan *delivery, opts.Queue), seen: map[string]struct{}{}}
}

// Setup adds a Notifier to mgr, reading the webhooks' keys in Kokumi's namespace with its API
// reader, recording Events as kokumi-notify and posting with client, the controller's egress
// policy (internal/egress); it sends while the manager runs (on the leader, as the reconcilers).
func Setup(mgr ctrl.Manager, namespace string, client *http.Client) (*Notifier, error) {
	n := New(Options{Secrets: mgr.GetAPIReader(), Namespace: namespace, Recorder: mgr.GetEventRecorder("kokumi-notify"), Client: client})
	if err := mgr.Add(n); err != nil {
		return nil, fmt.Errorf("add the notifier of the Environments' webhooks: %w", err)
	}
	return n, nil
}

// NeedLeaderElection is true: only the leader, whose reconcilers see the transitions, sends.
func (n *Notifier) NeedLeaderElection() bool { return true }

// Start runs the senders until ctx is done. A delivery waiting in the queue, or for its next
// try, then is not made.
func (n *Notifier) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range n.opts.Senders {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case d := <-n.queue:
					n.deliver(ctx, d)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// Body is the JSON a webhook receives of a transition.
type Body struct {
	// Event is the transition: one of v1.NotificationEvent's values.
	Event v1.NotificationEvent `json:"event"`
	// Message says what happened, in Kokumi's words.
	Message string `json:"message"`
	// Output is what the check printed, of a VerificationFailed (a Job's last words, the start
	// of an HTTP answer): written by the tenant's program, so untrusted; cleaned of control
	// characters and markup, at most 512 bytes (text.Untrusted). Absent for other events.
	Output string `json:"output,omitempty"`
	// Warning is true for a transition the Serving's Event warns of.
	Warning bool `json:"warning"`
	// Time is when the controller saw it, RFC 3339 in UTC.
	Time string `json:"time"`
	// Namespace of the Serving, its Order and the Environment.
	Namespace string `json:"namespace"`
	// Serving whose roll-out it is.
	Serving string `json:"serving"`
	// Order of the Serving (spec.orderRef.name).
	Order string `json:"order"`
	// Environment whose webhook this is.
	Environment string `json:"environment"`
	// Preparation the Serving is promoted to (spec.preparationName).
	Preparation string `json:"preparation"`
	// Rollout is where the roll-out stands (status.rollout), when the Serving has one.
	Rollout *BodyRollout `json:"rollout,omitempty"`
	// Webhook is the name of the webhook (spec.notifications[].name).
	Webhook string `json:"webhook"`
}

// BodyRollout is where a roll-out stands, of status.rollout.
type BodyRollout struct {
	// Preparation the roll-out rolls out.
	Preparation string `json:"preparation"`
	// Wave the roll-out is at.
	Wave string `json:"wave,omitempty"`
	// State of the roll-out.
	State v1.RolloutState `json:"state"`
}

// NewBody is the body of transition t of s's roll-out to webhook hook of env, seen at now.
func NewBody(env *v1.Environment, hook string, s *v1.Serving, t rollout.Transition, now time.Time) Body {
	b := Body{Event: t.Reason, Message: t.Message, Output: t.Output, Warning: t.Warning, Time: now.UTC().Format(time.RFC3339),
		Namespace: s.Namespace, Serving: s.Name, Order: s.Spec.OrderRef.Name, Environment: env.Name,
		Preparation: s.Spec.PreparationName, Webhook: hook}
	if r := s.Status.Rollout; r != nil {
		b.Rollout = &BodyRollout{Preparation: r.Preparation, Wave: r.Wave, State: r.State}
	}
	return b
}

// The media types of the bodies, by format.
const (
	// ContentTypeJSON is Kokumi's body.
	ContentTypeJSON = "application/json"
	// ContentTypeCloudEvents is a CloudEvents event in structured mode.
	ContentTypeCloudEvents = "application/cloudevents+json"
)

// CloudEvent is a CloudEvents 1.0 event in structured mode (JSON), of a transition: the body of a
// webhook whose format is CloudEvents.
type CloudEvent struct {
	// SpecVersion is the CloudEvents version, 1.0.
	SpecVersion string `json:"specversion"`
	// ID is the delivery's id, as webhook-id: the same on every try.
	ID string `json:"id"`
	// Source is the Environment whose webhook this is, as the path of its API object:
	// /apis/delivery.kokumi.dev/v1alpha1/namespaces/<namespace>/environments/<name>.
	Source string `json:"source"`
	// Type is dev.kokumi.rollout. and the event (dev.kokumi.rollout.RolloutPaused).
	Type string `json:"type"`
	// Subject is the Serving whose roll-out it is: servings/<name>.
	Subject string `json:"subject"`
	// Time is the body's time.
	Time string `json:"time"`
	// DataContentType is application/json.
	DataContentType string `json:"datacontenttype"`
	// Data is Kokumi's body.
	Data Body `json:"data"`
}

// CloudEventTypePrefix starts the type of a CloudEvent of a transition; the event follows.
const CloudEventTypePrefix = "dev.kokumi.rollout."

// Encode returns the media type and the bytes of body in format, for the delivery id: Kokumi's
// JSON (format Kokumi, or absent), or a CloudEvent whose data it is.
func Encode(format v1.NotificationFormat, id string, body Body) (contentType string, data []byte, err error) {
	if format != v1.NotificationFormatCloudEvents {
		data, err = json.Marshal(body)
		return ContentTypeJSON, data, err
	}
	data, err = json.Marshal(CloudEvent{SpecVersion: "1.0", ID: id,
		Source: "/apis/" + v1.GroupVersion.String() + "/namespaces/" + body.Namespace + "/environments/" + body.Environment,
		Type:   CloudEventTypePrefix + string(body.Event), Subject: "servings/" + body.Serving, Time: body.Time,
		DataContentType: ContentTypeJSON, Data: body})
	return ContentTypeCloudEvents, data, err
}

// Wants reports whether hook is told of event: its events name it, or it names none.
func Wants(hook v1.Notification, event v1.NotificationEvent) bool {
	return len(hook.Events) == 0 || slices.Contains(hook.Events, event)
}

// Sign is the value of SignatureHeader of the delivery id sent at timestamp (Unix seconds) with
// body, under key (the bytes ParseKey returns): v1, and the base64 of the HMAC-SHA256 of
// "id.timestamp.body".
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// ParseKey returns the bytes that key a webhook's signatures, of the value stored in its
// Secret: whsec_ and the standard base64 of at least MinKeyBytes bytes, as Standard Webhooks'
// libraries take it (surrounding white space, such as a file's last newline, is ignored). The
// error says what is wrong with the value, never the value.
func ParseKey(value []byte) ([]byte, error) {
	v := strings.TrimSpace(string(value))
	if !strings.HasPrefix(v, KeyPrefix) {
		return nil, fmt.Errorf("the value does not start with %s", KeyPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, KeyPrefix))
	if err != nil {
		return nil, fmt.Errorf("what follows %s is not standard base64", KeyPrefix)
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("it decodes to %d bytes, fewer than %d", len(key), MinKeyBytes)
	}
	return key, nil
}

// Notify queues a delivery of t to each webhook of env that wants it, and returns at once: a
// delivery that finds the queue full is dropped, logged and counted. A transition seen again
// from the same Serving (its uid and resourceVersion: a reconcile whose status write was lost
// runs again on the object it read) has the same delivery ids: one the Notifier queued already is
// not queued again.
func (n *Notifier) Notify(env *v1.Environment, s *v1.Serving, t rollout.Transition) {
	now := n.opts.Now()
	ref := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: env.Name, Namespace: env.Namespace, UID: env.UID, ResourceVersion: env.ResourceVersion}}
	for i, hook := range env.Spec.Notifications {
		if !Wants(hook, t.Reason) {
			continue
		}
		id := DeliveryID(s, i, hook, t)
		if n.repeat(id) {
			n.log().V(1).Info("a transition already queued for this webhook: not queued again", "namespace", env.Namespace,
				"environment", env.Name, "webhook", hook.Name, "event", string(t.Reason), "delivery", id)
			continue
		}
		contentType, body, err := Encode(hook.Format, id, NewBody(env, hook.Name, s, t, now))
		if err != nil { // a struct of strings: not reached
			n.failed(&delivery{env: ref, index: i, hook: hook, event: t.Reason}, fmt.Errorf("encode the body: %w", err))
			continue
		}
		n.enqueue(&delivery{id: id, env: ref, index: i, hook: *hook.DeepCopy(), event: t.Reason, contentType: contentType, body: body})
	}
}

// enqueue queues d, or drops it when the queue is full (and forgets its id: the transition seen
// again is queued).
func (n *Notifier) enqueue(d *delivery) {
	select {
	case n.queue <- d:
	default:
		n.forget(d.id)
		kmetrics.NotificationDelivered(kmetrics.DeliveryDropped)
		n.log().Error(nil, "the queue of webhook deliveries is full: dropped", d.keys()...)
	}
}

// deliver tries d once: sent, failed, or due again after a backoff.
func (n *Notifier) deliver(ctx context.Context, d *delivery) {
	d.tries++
	retryAfter, retry, err := n.post(ctx, d)
	switch {
	case err == nil:
		kmetrics.NotificationDelivered(kmetrics.DeliverySent)
		return
	case ctx.Err() != nil:
		return // stopping: neither sent nor failed
	case !retry:
		n.failed(d, err)
		return
	case d.tries >= n.opts.Tries:
		n.failed(d, fmt.Errorf("%w (gave up after %d tries)", err, d.tries))
		return
	}
	wait := Backoff(n.opts.FirstBackoff, d.tries, retryAfter, n.opts.MaxRetryAfter)
	n.log().V(1).Info("webhook delivery failed; trying again", append(d.keys(), "error", err.Error(), "in", wait.String())...)
	time.AfterFunc(wait, func() {
		if ctx.Err() == nil {
			n.enqueue(d)
		}
	})
}

// Backoff is the wait after try number tries (from 1) failed: first doubled at each try, or
// what the webhook's Retry-After asked for when longer, capped at maxRetryAfter.
func Backoff(first time.Duration, tries int, retryAfter, maxRetryAfter time.Duration) time.Duration {
	wait := first << (tries - 1)
	return max(wait, min(retryAfter, maxRetryAfter))
}

// post makes one request of d. A failure is retried when retry is true (a network error, a 5xx
// or a 429, after at least retryAfter when the webhook said so).
func (n *Notifier) post(ctx context.Context, d *delivery) (retryAfter time.Duration, retry bool, err error) {
	var key []byte
	if d.hook.SecretRef != nil {
		var err error
		if key, err = n.key(ctx, d); err != nil {
			var missing missingKey
			return 0, !errors.As(err, &missing), err
		}
	}
	// Each try is stamped, and signed, anew: a retry is as fresh as the first try.
	timestamp := n.opts.Now().Unix()
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.hook.URL, bytes.NewReader(d.body))
	if err != nil {
		return 0, false, fmt.Errorf("spec.notifications[%d].url %q: %w", d.index, d.hook.URL, err)
	}
	req.Header.Set("Content-Type", d.contentType)
	req.Header.Set("User-Agent", "kokumi/"+version.Version)
	req.Header.Set(IDHeader, d.id)
	req.Header.Set(TimestampHeader, strconv.FormatInt(timestamp, 10))
	if key != nil {
		req.Header.Set(SignatureHeader, Sign(key, d.id, timestamp, d.body))
	}
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		// An address the egress policy refuses stays refused: not tried again.
		return 0, egress.Refused(err) == nil, fmt.Errorf("post to %s: %w", d.hook.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, false, nil
	}
	err = fmt.Errorf("%s answered %s: %s", d.hook.URL, resp.Status, text.Truncate(strings.TrimSpace(string(answer)), 256))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return parseRetryAfter(resp.Header.Get("Retry-After"), n.opts.Now()), true, err
	}
	return 0, false, err
}

// missingKey is a webhook's Secret, or its key, that is not there: a delivery is not tried
// again, nor sent unsigned.
type missingKey struct{ msg string }

func (e missingKey) Error() string { return e.msg }

// key reads the key of the webhook's secretRef, in Kokumi's namespace.
func (n *Notifier) key(ctx context.Context, d *delivery) ([]byte, error) {
	key, problem, err := ReadKey(ctx, n.opts.Secrets, n.opts.Namespace, client.ObjectKeyFromObject(d.env), d.index, *d.hook.SecretRef)
	if err != nil {
		return nil, err
	}
	if problem != "" {
		return nil, missingKey{problem + "; the webhook " + d.hook.Name + " is not sent unsigned"}
	}
	return key, nil
}

// ReadKey reads the key ref names, the secretRef of webhook index of the Environment env's
// spec.notifications, from the Secret of that name in namespace, Kokumi's own, and parses it
// (ParseKey).
// A Secret or key that is missing or malformed is a problem: a message for the Environment that
// names the field, where the Secret must be and how to make it. An error is a failed read worth
// trying again.
func ReadKey(ctx context.Context, secrets client.Reader, namespace string, env client.ObjectKey, index int, ref v1.SecretKeyRef) (key []byte, problem string, err error) {
	field := fmt.Sprintf("spec.notifications[%d].secretRef", index)
	create := fmt.Sprintf("kubectl -n %s create secret generic %s --from-literal=%s=%s$(openssl rand -base64 32)", namespace, ref.Name, ref.Key, KeyPrefix)
	var secret corev1.Secret
	err = secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("Environment %s/%s: %s names the Secret %s, which is not in Kokumi's namespace %s "+
			"(webhook keys are read there, where the Environment's tenants can neither read nor delete them; "+
			"a Secret of that name in namespace %s is not read): create it with the key %s (%s) and give the receiver the same value, or fix %s",
			env.Namespace, env.Name, field, ref.Name, namespace, env.Namespace, ref.Key, create, field), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read the Secret %s/%s of Environment %s/%s's %s: %w", namespace, ref.Name, env.Namespace, env.Name, field, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok || len(value) == 0 {
		return nil, fmt.Sprintf("Environment %s/%s: %s names the key %s of the Secret %s/%s, which has no such key or an empty one: "+
			"add the key to the Secret (%s=%s<base64 of 32 random bytes>), or fix %s.key",
			env.Namespace, env.Name, field, ref.Key, namespace, ref.Name, ref.Key, KeyPrefix, field), nil
	}
	key, err = ParseKey(value)
	if err != nil {
		return nil, fmt.Sprintf("Environment %s/%s: %s names the key %s of the Secret %s/%s, which is no webhook key: %v; "+
			"write %s and the standard base64 of at least %d random bytes (%s$(openssl rand -base64 32)) to it, and give the receiver the same value",
			env.Namespace, env.Name, field, ref.Key, namespace, ref.Name, err, KeyPrefix, MinKeyBytes, KeyPrefix), nil
	}
	return key, "", nil
}

// parseRetryAfter reads a Retry-After header, seconds or an HTTP date; zero when absent or
// unreadable.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if at, err := http.ParseTime(h); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}

// failed counts d given up, logs why and records it on the Environment.
func (n *Notifier) failed(d *delivery, err error) {
	kmetrics.NotificationDelivered(kmetrics.DeliveryFailed)
	n.log().Error(err, "webhook delivery failed", d.keys()...)
	if n.opts.Recorder != nil {
		msg := fmt.Sprintf("webhook %s (spec.notifications[%d]) was not told of %s: %s", d.hook.Name, d.index, d.event, err.Error())
		n.opts.Recorder.Eventf(d.env, nil, corev1.EventTypeWarning, ReasonNotificationFailed, "Notify", "%s", text.ShortenMiddle(msg, text.MaxMessage))
	}
}

func (n *Notifier) log() logr.Logger { return ctrl.Log.WithName("notify") }

// keys are the log keys of d.
func (d *delivery) keys() []any {
	return []any{"namespace", d.env.Namespace, "environment", d.env.Name, "webhook", d.hook.Name, "event", string(d.event), "delivery", d.id, "tries", d.tries}
}

// DeliveryID is the id of the delivery of transition t of Serving s to the webhook at index of
// its Environment's spec.notifications: 32 hex digits of a hash of the Serving's uid and
// resourceVersion (the object the reconcile that saw t read), the webhook and the transition.
// The same transition seen again from the same object has the same id; one seen after the
// Serving changed, as a second pause after a resume, has another.
func DeliveryID(s *v1.Serving, index int, hook v1.Notification, t rollout.Transition) string {
	h := sha256.New()
	for _, part := range []string{string(s.UID), s.Namespace, s.Name, s.ResourceVersion, strconv.Itoa(index), hook.Name, hook.URL, string(t.Reason), t.Message} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// repeat reports whether id was queued before (of the last rememberedDeliveries), and remembers
// it when not.
func (n *Notifier) repeat(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.seen[id]; ok {
		return true
	}
	if len(n.order) < rememberedDeliveries {
		n.order = append(n.order, id)
	} else {
		delete(n.seen, n.order[n.next])
		n.order[n.next] = id
		n.next = (n.next + 1) % rememberedDeliveries
	}
	n.seen[id] = struct{}{}
	return false
}

// forget takes id out of the ids remembered, so that a repeat of it is queued.
func (n *Notifier) forget(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.seen, id)
}
