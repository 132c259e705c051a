package serving

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/notify"
)

// hookRequest is a request a webhook received.
type hookRequest struct {
	header http.Header
	body   []byte
	// answer is the status it was answered.
	answer int
}

// hookReceiver is a webhook on loopback: it answers 503 to the first fails tries of each
// delivery (by its id), then 200.
type hookReceiver struct {
	*httptest.Server
	fails int
	mu    sync.Mutex
	got   []hookRequest
	tries map[string]int
}

func newHookReceiver(t *testing.T, fails int) *hookReceiver {
	h := &hookReceiver{fails: fails, tries: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		id := r.Header.Get(notify.IDHeader)
		h.tries[id]++
		answer := http.StatusOK
		if h.tries[id] <= h.fails {
			answer = http.StatusServiceUnavailable
		}
		h.got = append(h.got, hookRequest{header: r.Header.Clone(), body: body, answer: answer})
		h.mu.Unlock()
		w.WriteHeader(answer)
	}))
	t.Cleanup(h.Close)
	return h
}

// pauses returns the requests of RolloutPaused, by delivery id, in the order they came.
func (h *hookReceiver) pauses() map[string][]hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]hookRequest{}
	for _, r := range h.got {
		var body struct{ Event string }
		if json.Unmarshal(r.body, &body) == nil && body.Event == "RolloutPaused" {
			id := r.header.Get(notify.IDHeader)
			out[id] = append(out[id], r)
		}
	}
	return out
}

func (h *hookReceiver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// verifyDelivery runs the documented verification (notify.Verify) of r with secret, as a receiver whose
// clock stands at now.
func verifyDelivery(r hookRequest, secret string, now time.Time) error {
	return notify.Verify(secret, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.header.Get("webhook-signature"), r.body, now)
}

// verified checks r with secret, as a receiver would at once, and returns its body.
func verified(t *testing.T, r hookRequest, secret string) map[string]any {
	t.Helper()
	if err := verifyDelivery(r, secret, time.Now()); err != nil {
		t.Errorf("the delivery %s does not verify with the Secret's key: %v", r.header.Get("webhook-id"), err)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var body map[string]any
	must(t, json.Unmarshal(r.body, &body))
	return body
}

// newKey returns a webhook key as the docs make one: whsec_ and the base64 of 32 random bytes.
func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	must(t, err)
	return notify.KeyPrefix + base64.StdEncoding.EncodeToString(b)
}

// keySecret creates the Secret name in Kokumi's namespace with the key signing of value.
func (f *fixture) keySecret(name, value string) {
	f.t.Helper()
	must(f.t, env.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace},
		Data: map[string][]byte{"signing": []byte(value)}}))
	f.t.Cleanup(func() {
		_ = env.Client.Delete(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace}})
	})
}

// setNotifications sets the Environment edge's spec.notifications as c.
func (f *fixture) setNotifications(c client.Client, hooks []v1.Notification) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Notifications = hooks
		return c.Update(f.ctx, &e)
	})
}

// A person pauses a roll-out: the Environment's webhooks are told, signed with the key of the
// Secret of Kokumi's namespace its secretRef names; a webhook that answers 503 gets the same
// delivery again; one whose events leave the pause out, and one whose Secret is not in Kokumi's
// namespace (but in the Environment's), get nothing.
func TestRolloutNotificationsArriveSignedAndAreRetried(t *testing.T) {
	f := newFixture(t)
	chat, pager, audit, typo := newHookReceiver(t, 0), newHookReceiver(t, 2), newHookReceiver(t, 0), newHookReceiver(t, 0)
	key, name := newKey(t), "webhooks-"+f.ns // Kokumi's namespace is the tests' shared one
	f.keySecret(name, key)
	// A Secret of the name the typo names, in the Environment's namespace: never read.
	typoName := "webhook-" + f.ns
	must(t, env.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: typoName, Namespace: f.ns}, Data: map[string][]byte{"signing": []byte(newKey(t))}}))
	signing := &v1.SecretKeyRef{Name: name, Key: "signing"}
	must(t, f.setNotifications(env.Client, []v1.Notification{
		{Name: "chat", URL: chat.URL + "/hooks/kokumi", SecretRef: signing},
		{Name: "pager", URL: pager.URL, SecretRef: signing, Events: []v1.NotificationEvent{"RolloutPaused"}},
		{Name: "audit", URL: audit.URL, SecretRef: signing, Events: []v1.NotificationEvent{"RolloutAborted", "RolledBack"}},
		{Name: "typo", URL: typo.URL, SecretRef: &v1.SecretKeyRef{Name: typoName, Key: "signing"}},
	}))
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	canary, rest := "nt-canary-"+f.ns, "nt-a-"+f.ns // a name of its own on each run
	f.ringCluster(canary, "canary", true)
	f.ringCluster(rest, "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{canary}, []string{rest})

	// A tenant cannot point the Environment's webhooks elsewhere.
	tenant, alice := f.tenant("alice-" + f.ns)
	err := f.setNotifications(tenant, []v1.Notification{{Name: "mine", URL: "http://attacker.example/", SecretRef: signing}})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant with edit changed the Environment's notifications: %v", err)
	}

	// Paused, then promoted: the roll-out of two waits, paused.
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, alice }))
	f.promote(two.Name)
	f.eventually("the roll-out of "+two.Name+" is paused", func() error {
		if r := f.serving().Status.Rollout; r == nil || r.Preparation != two.Name || r.State != v1.RolloutPaused {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	f.stillTargets(one.Spec.Artifact.Digest, canary, rest)

	// The webhook with every event gets the pause, signed, with the facts.
	f.eventually("chat gets RolloutPaused", func() error {
		if len(chat.pauses()) == 0 {
			return fmt.Errorf("%d requests, none of RolloutPaused", chat.count())
		}
		return nil
	})
	for _, tries := range chat.pauses() {
		body := verified(t, tries[0], key)
		for k, want := range map[string]any{"event": "RolloutPaused", "namespace": f.ns, "serving": "podinfo-edge", "order": "podinfo-edge",
			"environment": "edge", "preparation": two.Name, "webhook": "chat", "warning": false} {
			if body[k] != want {
				t.Errorf("body %s: %v, want %v (%s)", k, body[k], want, tries[0].body)
			}
		}
		if r, _ := body["rollout"].(map[string]any); r == nil || r["state"] != "Paused" || r["preparation"] != two.Name {
			t.Errorf("body rollout %v: where the roll-out stands now (%s)", body["rollout"], tries[0].body)
		}
		if msg, _ := body["message"].(string); !strings.Contains(msg, alice+" paused the roll-out") {
			t.Errorf("body message %q", msg)
		}
		if ua := tries[0].header.Get("User-Agent"); !strings.HasPrefix(ua, "kokumi/") {
			t.Errorf("User-Agent %q", ua)
		}
	}

	// The webhook that answers 503 twice gets the same delivery three times, the last answered 200.
	f.eventually("pager gets RolloutPaused a third time", func() error {
		for _, tries := range pager.pauses() {
			if len(tries) >= 3 {
				return nil
			}
		}
		return fmt.Errorf("deliveries of RolloutPaused: %d requests", pager.count())
	})
	for id, tries := range pager.pauses() {
		if len(tries) != 3 || tries[0].answer != 503 || tries[1].answer != 503 || tries[2].answer != 200 {
			t.Errorf("delivery %s was tried %d times, want 3 (503, 503, 200)", id, len(tries))
		}
		for _, r := range tries {
			if string(r.body) != string(tries[0].body) {
				t.Errorf("delivery %s: a retry's body differs from the first's", id)
			}
			verified(t, r, key)
		}
	}

	// By then (its retries waited 3 s), the webhook whose events leave the pause out, and the one
	// whose Secret is not in Kokumi's namespace, have got nothing.
	if n := audit.count(); n != 0 {
		t.Errorf("the webhook of RolloutAborted and RolledBack got %d requests", n)
	}
	if n := typo.count(); n != 0 {
		t.Errorf("the webhook whose Secret is missing got %d requests", n)
	}
	if faults == nil {
		f.eventually("a NotificationFailed Event on the Environment", func() error {
			for _, m := range f.eventsOf("edge", notify.ReasonNotificationFailed) {
				if strings.Contains(m, "spec.notifications[3].secretRef names the Secret "+typoName+", which is not in Kokumi's namespace "+cfg.Namespace) &&
					strings.Contains(m, "not sent unsigned") {
					return nil
				}
			}
			return fmt.Errorf("Events %q", f.eventsOf("edge", notify.ReasonNotificationFailed))
		})
	}
}

// The webhook key is not the tenant's: a tenant with edit in the Environment's namespace can
// neither read, list nor delete it in Kokumi's namespace; deleting the Secret of the same name in
// its own namespace (where earlier versions read the key) changes nothing: the pause still
// arrives signed with the admin's key, which a key the tenant knows does not verify. A delivery
// played again more than five minutes later fails the documented verification.
func TestATenantCanNeitherReadNorDeleteTheWebhookKey(t *testing.T) {
	f := newFixture(t)
	hook := newHookReceiver(t, 0)
	key, name := newKey(t), "webhooks-"+f.ns
	f.keySecret(name, key)
	tenantKey := newKey(t) // what the tenant can read or write in its own namespace
	must(t, env.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Data: map[string][]byte{"signing": []byte(tenantKey)}}))
	must(t, f.setNotifications(env.Client, []v1.Notification{{Name: "change-management", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: name, Key: "signing"}}}))

	tenant, alice := f.tenant("alice-" + f.ns)
	var s corev1.Secret
	if err := tenant.Get(f.ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: name}, &s); !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant with edit read the webhook key in %s: %v", cfg.Namespace, err)
	}
	if err := tenant.List(f.ctx, &corev1.SecretList{}, client.InNamespace(cfg.Namespace)); !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant with edit listed the Secrets of %s: %v", cfg.Namespace, err)
	}
	if err := tenant.Delete(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace}}); !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant with edit deleted the webhook key in %s: %v", cfg.Namespace, err)
	}
	// What the tenant may do: read and delete the Secrets of its own namespace.
	must(t, tenant.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &s))
	must(t, tenant.Delete(f.ctx, &s))

	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	canary, rest := "nk-canary-"+f.ns, "nk-a-"+f.ns
	f.ringCluster(canary, "canary", true)
	f.ringCluster(rest, "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{canary}, []string{rest})
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, alice }))
	f.promote(two.Name)

	f.eventually("the webhook gets RolloutPaused", func() error {
		if len(hook.pauses()) == 0 {
			return fmt.Errorf("%d requests, none of RolloutPaused", hook.count())
		}
		return nil
	})
	for id, tries := range hook.pauses() {
		r := tries[0]
		verified(t, r, key)
		if err := verifyDelivery(r, tenantKey, time.Now()); err == nil {
			t.Errorf("delivery %s verifies with the key the tenant knew", id)
		}
		// A replay: the same request, as recorded, six minutes later.
		if err := verifyDelivery(r, key, time.Now().Add(notify.Tolerance+time.Minute)); err == nil || !strings.Contains(err.Error(), "more than 5 minutes away") {
			t.Errorf("delivery %s replayed six minutes later: %v, want refused for its stale webhook-timestamp", id, err)
		}
	}
}

// What a failed check printed is the tenant's program's: it reaches the webhook in output,
// cleaned of control characters and markup, and the Serving's Event marked and quoted; the
// message is Kokumi's words alone.
func TestACheckOutputReachesTheWebhookMarkedAndCleaned(t *testing.T) {
	f := newFixture(t)
	check := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "<!channel> all clear\n[approve here](https://evil.example/) \x1b[31m@here")
	}))
	t.Cleanup(check.Close)
	hook := newHookReceiver(t, 0)
	must(t, f.setNotifications(env.Client, []v1.Notification{{Name: "incidents", URL: hook.URL, Events: []v1.NotificationEvent{"VerificationFailed"}}}))
	// The admin shows the answer (http.showResponse): what the check printed is the tenant's.
	_, _, one := f.gatedCanary("no", v1.Verification{Name: "smoke", HTTP: &v1.HTTPVerification{URL: check.URL + "/healthz",
		SuccessCondition: "response.status == 200", ShowResponse: true}})

	var body map[string]any
	f.eventually("the webhook gets VerificationFailed", func() error {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		if len(hook.got) == 0 {
			return fmt.Errorf("no request")
		}
		return json.Unmarshal(hook.got[0].body, &body)
	})
	want := "verification smoke of wave canary failed for Preparation " + one.Name
	output, _ := body["output"].(string)
	if body["event"] != "VerificationFailed" || body["message"] != want {
		t.Errorf("body %v, want the message %q", body, want)
	}
	if !strings.Contains(output, "channel all clear approve here (https://evil.example/) 31m here") || strings.ContainsAny(output, "<>[]@!\x1b\n") {
		t.Errorf("output %q: not the check's answer, cleaned", output)
	}
	if faults == nil {
		f.eventually("the Serving's Event VerificationFailed", func() error {
			for _, m := range f.eventsOf(f.serving().Name, "VerificationFailed") {
				if strings.HasPrefix(m, want+"; the check's output (untrusted): \"") && strings.Contains(m, "channel all clear") && !strings.ContainsAny(m, "<>[]@\x1b\n") {
					return nil
				}
			}
			return fmt.Errorf("Events %q", f.eventsOf(f.serving().Name, "VerificationFailed"))
		})
	}
}
