package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/version"
)

// request is what a receiver got.
type request struct {
	header http.Header
	body   []byte
}

// receiver is a webhook on loopback answering the codes of answers in turn, then the last.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	got     []request
	answers []int
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, request{header: req.Header.Clone(), body: body})
		code := http.StatusOK
		if n := len(r.got); len(r.answers) > 0 {
			code = r.answers[min(n, len(r.answers))-1]
		}
		r.mu.Unlock()
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code)+strings.Repeat(".", 10000))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// waitFor waits until the receiver got n requests.
func (r *receiver) waitFor(t *testing.T, n int) []request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got := r.requests(); len(got) >= n {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the receiver got %d requests, want %d", len(r.requests()), n)
	return nil
}

// deliveries is kokumi_notification_deliveries_total of result.
func deliveries(t *testing.T, result string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != kmetrics.NotificationDeliveriesName {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series of %s with result %s", kmetrics.NotificationDeliveriesName, result)
	return 0
}

// counted waits until kokumi_notification_deliveries_total of result is want.
func counted(t *testing.T, result string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for deliveries(t, result) != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := deliveries(t, result); got != want {
		t.Fatalf("%s deliveries: %v, want %v", result, got, want)
	}
}

var (
	serving = &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: "team-a"},
		Spec:   v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "podinfo"}, PreparationName: "podinfo-edge-2"},
		Status: v1.ServingStatus{Rollout: &v1.RolloutStatus{Preparation: "podinfo-edge-2", Wave: "canary", State: v1.RolloutPaused}}}
	paused = rollout.Transition{Reason: "RolloutPaused", Message: "alice paused the roll-out of Preparation podinfo-edge-2"}
	at     = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
)

// kokumi is Kokumi's namespace in these tests, where the webhooks' keys are read.
const kokumi = "kokumi-system"

// chatKey is a webhook key as stored (whsec_ and the base64 of 32 bytes), chatKeyBytes what it
// decodes to.
var (
	chatKeyBytes = []byte("0123456789abcdef0123456789abcdef")
	chatKey      = KeyPrefix + base64.StdEncoding.EncodeToString(chatKeyBytes)
)

func environment(hooks ...v1.Notification) *v1.Environment {
	return &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "team-a"}, Spec: v1.EnvironmentSpec{Notifications: hooks}}
}

// start runs a Notifier of opts, fast, with the Secrets given, until the test ends; its clock
// stands at at unless opts names one.
func start(t *testing.T, opts Options, secrets ...*corev1.Secret) *Notifier {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, s := range secrets {
		b = b.WithObjects(s)
	}
	opts.Secrets, opts.Namespace, opts.FirstBackoff = b.Build(), kokumi, time.Millisecond
	if opts.Now == nil {
		opts.Now = func() time.Time { return at }
	}
	n := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the Notifier did not stop with its context")
		}
	})
	return n
}

// secret is a Secret of Kokumi's namespace.
func secret(name, key, value string) *corev1.Secret {
	return secretIn(kokumi, name, key, value)
}

func secretIn(namespace, name, key, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: map[string][]byte{key: []byte(value)}}
}

func TestADeliveryIsSignedAndCarriesTheFacts(t *testing.T) {
	hook := newReceiver(t)
	unsigned := newReceiver(t)
	sent := deliveries(t, kmetrics.DeliverySent)
	n := start(t, Options{}, secret("hooks", "chat", chatKey+"\n"))
	n.Notify(environment(
		v1.Notification{Name: "chat", URL: hook.URL + "/in", SecretRef: &v1.SecretKeyRef{Name: "hooks", Key: "chat"}},
		v1.Notification{Name: "plain", URL: unsigned.URL},
	), serving, paused)

	r := hook.waitFor(t, 1)[0]
	id, ts := r.header.Get(IDHeader), r.header.Get(TimestampHeader)
	if len(id) != 32 {
		t.Errorf("%s: %q, want 32 hex digits", IDHeader, id)
	}
	if want := strconv.FormatInt(at.Unix(), 10); ts != want {
		t.Errorf("%s: %q, want %q (the Unix seconds of the try)", TimestampHeader, ts, want)
	}
	sig := r.header.Get(SignatureHeader)
	if want := Sign(chatKeyBytes, id, at.Unix(), r.body); sig != want || !strings.HasPrefix(sig, "v1,") || len(sig) != len("v1,")+44 {
		t.Errorf("%s: %q, want %q", SignatureHeader, sig, want)
	}
	// The signature is the HMAC of id.timestamp.body, keyed with the key's decoded bytes.
	mac := hmac.New(sha256.New, chatKeyBytes)
	mac.Write([]byte(id + "." + ts + "." + string(r.body)))
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); sig != want {
		t.Errorf("%s: %q is not the HMAC-SHA256 of id.timestamp.body (%q)", SignatureHeader, sig, want)
	}
	if err := Verify(chatKey, id, ts, sig, r.body, at); err != nil {
		t.Errorf("the documented verification refuses the delivery: %v", err)
	}
	if Sign([]byte(chatKey), id, at.Unix(), r.body) == sig || Sign(chatKeyBytes, id, at.Unix()+1, r.body) == sig || Sign(chatKeyBytes, "other", at.Unix(), r.body) == sig {
		t.Error("the undecoded key, another timestamp or another id verifies the signature")
	}
	for h, want := range map[string]string{"Content-Type": "application/json", "User-Agent": "kokumi/" + version.Version,
		"X-Kokumi-Signature": "", "X-Kokumi-Delivery": "", "X-Kokumi-Event": ""} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"event": "RolloutPaused", "message": paused.Message, "warning": false, "time": "2026-12-05T10:00:00Z",
		"namespace": "team-a", "serving": "podinfo-edge", "order": "podinfo", "environment": "edge", "preparation": "podinfo-edge-2",
		"rollout": map[string]any{"preparation": "podinfo-edge-2", "wave": "canary", "state": "Paused"}, "webhook": "chat"}
	if a, b := mustJSON(t, body), mustJSON(t, want); a != b {
		t.Errorf("body\n%s\nwant\n%s", a, b)
	}

	// A webhook without a key gets the body unsigned, with an id and a timestamp; its own name in it.
	p := unsigned.waitFor(t, 1)[0]
	if h := p.header.Get(SignatureHeader); h != "" {
		t.Errorf("an unsigned webhook got %s %q", SignatureHeader, h)
	}
	if !strings.Contains(string(p.body), `"webhook":"plain"`) || p.header.Get(IDHeader) == id || p.header.Get(TimestampHeader) != ts {
		t.Errorf("the second webhook's delivery %s at %s: %s", p.header.Get(IDHeader), p.header.Get(TimestampHeader), p.body)
	}
	counted(t, kmetrics.DeliverySent, sent+2)
}

func TestAKeyIsWhsecAndTheBase64OfEnoughBytes(t *testing.T) {
	for value, want := range map[string]string{
		chatKey:                           "",
		" " + chatKey + "\n":              "",
		"s3cret-of-thirty-two-bytes-long": "does not start with whsec_",
		KeyPrefix + "not base64!":         "not standard base64",
		KeyPrefix + base64.StdEncoding.EncodeToString([]byte("short")): "decodes to 5 bytes, fewer than 24",
	} {
		key, err := ParseKey([]byte(value))
		switch {
		case want == "" && (err != nil || string(key) != string(chatKeyBytes)):
			t.Errorf("ParseKey(%q): %q, %v; want the decoded bytes", value, key, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseKey(%q): %v, want an error with %q", value, err, want)
		case err != nil && strings.Contains(err.Error(), strings.TrimPrefix(value, KeyPrefix)):
			t.Errorf("ParseKey's error %q tells the value", err)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAWebhookIsToldOnlyOfTheEventsItNames(t *testing.T) {
	all := v1.Notification{Name: "all"}
	some := v1.Notification{Name: "some", Events: []v1.NotificationEvent{"RolledBack", "RolloutAborted"}}
	if !Wants(all, "RolloutPaused") || !Wants(some, "RolloutAborted") || Wants(some, "RolloutPaused") {
		t.Error("Wants: absent events is all; a list names those sent")
	}
	other := newReceiver(t)
	named := newReceiver(t)
	n := start(t, Options{})
	n.Notify(environment(v1.Notification{Name: "other", URL: other.URL, Events: []v1.NotificationEvent{"RolloutAborted"}},
		v1.Notification{Name: "named", URL: named.URL, Events: []v1.NotificationEvent{"RolloutPaused"}}), serving, paused)
	named.waitFor(t, 1)
	n.Notify(environment(v1.Notification{Name: "named", URL: named.URL, Events: []v1.NotificationEvent{"RolloutPaused"}}), serving,
		rollout.Transition{Reason: "RolloutResumed"})
	n.Notify(environment(v1.Notification{Name: "other", URL: other.URL, Events: []v1.NotificationEvent{"RolloutAborted"}}), serving,
		rollout.Transition{Reason: "RolloutAborted", Warning: true})
	if got := other.waitFor(t, 1); len(got) != 1 || !strings.Contains(string(got[0].body), `"event":"RolloutAborted"`) {
		t.Errorf("the webhook of RolloutAborted got %d requests", len(got))
	}
	if got := named.requests(); len(got) != 1 {
		t.Errorf("the webhook of RolloutPaused got %d requests, want the pause only", len(got))
	}
}

func TestA5xxOrA429IsTriedAgainWithTheSameIdAndAnother4xxIsNot(t *testing.T) {
	flaky := newReceiver(t, 503, 429, 200)
	refused := newReceiver(t, 404)
	down := newReceiver(t, 500)
	sent, failed := deliveries(t, kmetrics.DeliverySent), deliveries(t, kmetrics.DeliveryFailed)
	rec := events.NewFakeRecorder(10)
	n := start(t, Options{Tries: 3, Recorder: rec})
	n.Notify(environment(v1.Notification{Name: "flaky", URL: flaky.URL}), serving, paused)
	got := flaky.waitFor(t, 3)
	for _, r := range got {
		if r.header.Get(IDHeader) != got[0].header.Get(IDHeader) || string(r.body) != string(got[0].body) {
			t.Errorf("a retry's id %s and body differ from the first's (%s)", r.header.Get(IDHeader), got[0].header.Get(IDHeader))
		}
	}
	counted(t, kmetrics.DeliverySent, sent+1)

	n.Notify(environment(v1.Notification{Name: "refused", URL: refused.URL}), serving, paused)
	refused.waitFor(t, 1)
	counted(t, kmetrics.DeliveryFailed, failed+1)
	if e := <-rec.Events; !strings.Contains(e, ReasonNotificationFailed) || !strings.Contains(e, "404 Not Found: Not Found...") || len(e) > 1100 {
		t.Errorf("Event %q", e)
	}

	n.Notify(environment(v1.Notification{Name: "down", URL: down.URL}), serving, paused)
	down.waitFor(t, 3)
	counted(t, kmetrics.DeliveryFailed, failed+2)
	if e := <-rec.Events; !strings.Contains(e, "500 Internal Server Error") || !strings.Contains(e, "gave up after 3 tries") {
		t.Errorf("Event %q", e)
	}
	if n := len(refused.requests()) + len(down.requests()); n != 4 {
		t.Errorf("%d requests to the refusing and failing webhooks, want 1 and 3", n)
	}
}

func TestANetworkErrorIsTriedAgain(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	url := gone.URL
	gone.Close()
	rec := events.NewFakeRecorder(10)
	n := start(t, Options{Tries: 2, Recorder: rec})
	n.Notify(environment(v1.Notification{Name: "gone", URL: url}), serving, paused)
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "gave up after 2 tries") || !strings.Contains(e, "connection refused") {
			t.Errorf("Event %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no failure")
	}
}

// A key is read in Kokumi's namespace only: a Secret of the name in the Environment's namespace
// (which its tenants may write) is not read; a missing Secret, key, or a value that is no key,
// fails the delivery with an Event that names the field and the fix, and nothing is sent.
func TestAMissingOrMalformedKeyFailsTheDeliveryAndSendsNothingUnsigned(t *testing.T) {
	hook := newReceiver(t)
	failed := deliveries(t, kmetrics.DeliveryFailed)
	rec := events.NewFakeRecorder(10)
	n := start(t, Options{Recorder: rec}, secret("hooks", "other", chatKey), secret("raw", "chat", "s3cret"),
		secretIn("team-a", "tenants", "chat", chatKey))
	n.Notify(environment(
		v1.Notification{Name: "chat", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: "nope", Key: "token"}},
		v1.Notification{Name: "ops", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: "hooks", Key: "token"}},
		v1.Notification{Name: "tenant", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: "tenants", Key: "chat"}},
		v1.Notification{Name: "raw", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: "raw", Key: "chat"}},
	), serving, paused)
	counted(t, kmetrics.DeliveryFailed, failed+4)
	msgs := map[string]bool{}
	for range 4 {
		e := <-rec.Events
		msgs[e] = true
	}
	for _, want := range [][]string{
		{"Environment team-a/edge", "spec.notifications[0].secretRef names the Secret nope, which is not in Kokumi's namespace kokumi-system",
			"kubectl -n kokumi-system create secret generic nope --from-literal=token=whsec_$(openssl rand -base64 32)", "not sent unsigned"},
		{"Environment team-a/edge", "spec.notifications[1].secretRef names the key token of the Secret kokumi-system/hooks",
			"add the key to the Secret", "or fix spec.notifications[1].secretRef.key", "not sent unsigned"},
		{"spec.notifications[2].secretRef names the Secret tenants, which is not in Kokumi's namespace kokumi-system",
			"a Secret of that name in namespace team-a is not read"},
		{"spec.notifications[3].secretRef names the key chat of the Secret kokumi-system/raw, which is no webhook key: the value does not start with whsec_",
			"not sent unsigned"},
	} {
		found := false
		for m := range msgs {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(m, w)
			}
			found = found || ok
		}
		if !found {
			t.Errorf("no Event with %q in %v", want, msgs)
		}
	}
	for m := range msgs {
		if strings.Contains(m, "s3cret") || strings.Contains(m, chatKey) {
			t.Errorf("an Event tells a key: %s", m)
		}
	}
	if got := hook.requests(); len(got) != 0 {
		t.Errorf("the webhook got %d requests, unsigned", len(got))
	}
}

func TestAFullQueueDropsWithoutBlocking(t *testing.T) {
	dropped := deliveries(t, kmetrics.DeliveryDropped)
	n := New(Options{Queue: 2}) // not started: nothing takes from the queue
	start := time.Now()
	s := serving.DeepCopy()
	for i := range 5 {
		s.ResourceVersion = strconv.Itoa(i) // five transitions, not one seen again
		n.Notify(environment(v1.Notification{Name: "chat", URL: "http://127.0.0.1:1"}), s, paused)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Notify blocked %v", d)
	}
	if got := deliveries(t, kmetrics.DeliveryDropped); got != dropped+3 {
		t.Errorf("dropped %v, want %v", got, dropped+3)
	}
	// A dropped delivery is not remembered: the transition seen again is queued, and dropped again.
	n.Notify(environment(v1.Notification{Name: "chat", URL: "http://127.0.0.1:1"}), s, paused)
	if got := deliveries(t, kmetrics.DeliveryDropped); got != dropped+4 {
		t.Errorf("dropped %v, want %v: a dropped delivery seen again was taken for a repeat", got, dropped+4)
	}
}

func TestBackoffDoublesAndHonoursRetryAfterUpToACap(t *testing.T) {
	var waits []time.Duration
	for try := 1; try < DefaultTries; try++ {
		waits = append(waits, Backoff(DefaultFirstBackoff, try, 0, DefaultMaxRetryAfter))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}; mustJSON(t, waits) != mustJSON(t, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	if got := Backoff(time.Second, 1, 30*time.Second, time.Minute); got != 30*time.Second {
		t.Errorf("Retry-After 30s: %v", got)
	}
	if got := Backoff(time.Second, 1, time.Hour, time.Minute); got != time.Minute {
		t.Errorf("Retry-After an hour: %v, want the cap", got)
	}
	if got := Backoff(time.Second, 3, time.Second, time.Minute); got != 4*time.Second {
		t.Errorf("Retry-After shorter than the backoff: %v", got)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{"": 0, "7": 7 * time.Second, "-3": 0, "soon": 0,
		now.Add(20 * time.Second).Format(http.TimeFormat): 20 * time.Second, now.Add(-time.Hour).Format(http.TimeFormat): 0} {
		if got := parseRetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", h, got, want)
		}
	}
}

// A reconcile whose status write was lost sees the same transition again from the same Serving:
// it keeps its delivery id and is not sent again; after the Serving changed (a second pause after
// a resume), the same event is a delivery of its own.
func TestATransitionSeenAgainFromTheSameServingIsSentOnce(t *testing.T) {
	hook := newReceiver(t)
	n := start(t, Options{})
	env := environment(v1.Notification{Name: "chat", URL: hook.URL})
	s := serving.DeepCopy()
	s.UID, s.ResourceVersion = "3f1c", "41"
	n.Notify(env, s, paused)
	n.Notify(env, s.DeepCopy(), paused)
	first := hook.waitFor(t, 1)[0].header.Get(IDHeader)
	if want := DeliveryID(s, 0, env.Spec.Notifications[0], paused); first != want {
		t.Errorf("%s: %q, want DeliveryID's %q", IDHeader, first, want)
	}

	s.ResourceVersion = "57"
	n.Notify(env, s, paused)
	got := hook.waitFor(t, 2)
	if second := got[1].header.Get(IDHeader); second == first {
		t.Errorf("the pause of a changed Serving has the first's id %s", first)
	}
	time.Sleep(100 * time.Millisecond) // a repeat, had it been queued, would have come by now
	if got := hook.requests(); len(got) != 2 {
		t.Errorf("the webhook got %d requests, want 2: the repeat was sent", len(got))
	}
}

// The Notifier remembers the last rememberedDeliveries ids, not more.
func TestTheNotifierRemembersABoundedNumberOfDeliveries(t *testing.T) {
	n := New(Options{})
	if n.repeat("first") || !n.repeat("first") {
		t.Fatal("a repeat of an id just queued is not seen")
	}
	for i := range rememberedDeliveries {
		n.repeat(strconv.Itoa(i))
	}
	if len(n.seen) != rememberedDeliveries || len(n.order) != rememberedDeliveries {
		t.Errorf("it remembers %d ids in a ring of %d, want %d", len(n.seen), len(n.order), rememberedDeliveries)
	}
	if n.repeat("first") {
		t.Error("the oldest id is still remembered past the bound")
	}
	if !n.repeat(strconv.Itoa(rememberedDeliveries - 1)) {
		t.Error("the newest id is forgotten")
	}
}

// What a check printed reaches the webhook in output, apart from Kokumi's message.
func TestAChecksOutputGoesInAFieldOfItsOwn(t *testing.T) {
	hook := newReceiver(t)
	n := start(t, Options{})
	failed := rollout.Transition{Reason: "VerificationFailed", Warning: true,
		Message: "verification smoke of wave canary failed for Preparation podinfo-edge-2", Output: "channel all clear, approve here"}
	n.Notify(environment(v1.Notification{Name: "chat", URL: hook.URL}), serving, failed)
	var body map[string]any
	if err := json.Unmarshal(hook.waitFor(t, 1)[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if body["event"] != "VerificationFailed" || body["message"] != failed.Message || body["output"] != failed.Output || body["warning"] != true {
		t.Errorf("body %v", body)
	}
}

// A webhook whose format is CloudEvents gets a CloudEvents 1.0 event in structured mode, whose
// data is Kokumi's body and whose id is the delivery's; headers and signature are the same.
func TestACloudEventsWebhookGetsAStructuredEventSignedAlike(t *testing.T) {
	hook := newReceiver(t)
	n := start(t, Options{}, secret("hooks", "chat", chatKey))
	s := serving.DeepCopy()
	s.UID, s.ResourceVersion = "3f1c", "41"
	n.Notify(environment(v1.Notification{Name: "bus", URL: hook.URL, Format: v1.NotificationFormatCloudEvents,
		SecretRef: &v1.SecretKeyRef{Name: "hooks", Key: "chat"}}), s, paused)
	r := hook.waitFor(t, 1)[0]
	if ct := r.header.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Errorf("Content-Type %q", ct)
	}
	id := r.header.Get(IDHeader)
	if err := Verify(chatKey, id, r.header.Get(TimestampHeader), r.header.Get(SignatureHeader), r.body, at); err != nil {
		t.Errorf("the documented verification refuses the CloudEvent: %v", err)
	}
	var event map[string]any
	if err := json.Unmarshal(r.body, &event); err != nil {
		t.Fatal(err)
	}
	data, _ := event["data"].(map[string]any)
	delete(event, "data")
	want := map[string]any{"specversion": "1.0", "id": id, "source": "/apis/delivery.kokumi.dev/v1alpha1/namespaces/team-a/environments/edge",
		"type": "dev.kokumi.rollout.RolloutPaused", "subject": "servings/podinfo-edge", "time": "2026-12-05T10:00:00Z", "datacontenttype": "application/json"}
	if a, b := mustJSON(t, event), mustJSON(t, want); a != b {
		t.Errorf("event\n%s\nwant\n%s", a, b)
	}
	if data["event"] != "RolloutPaused" || data["message"] != paused.Message || data["webhook"] != "bus" || data["serving"] != "podinfo-edge" {
		t.Errorf("data %v: not Kokumi's body", data)
	}
	if id != DeliveryID(s, 0, v1.Notification{Name: "bus", URL: hook.URL, Format: v1.NotificationFormatCloudEvents,
		SecretRef: &v1.SecretKeyRef{Name: "hooks", Key: "chat"}}, paused) {
		t.Errorf("id %s is not the delivery's", id)
	}
}
