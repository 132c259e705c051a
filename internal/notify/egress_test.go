package notify

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/egress"
)

// Webhooks go through the controller's egress policy: one at an address it refuses (here
// loopback, under the default policy) is not posted to, and fails at once, not tried again.
func TestAWebhookAtARefusedAddressIsNotPostedTo(t *testing.T) {
	hook := newReceiver(t)
	rec := events.NewFakeRecorder(10)
	n := start(t, Options{Tries: 3, Recorder: rec, Client: egress.Policy{}.Client()})
	n.Notify(environment(v1.Notification{Name: "local", URL: hook.URL}), serving, paused)
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "127.0.0.1 is a loopback address") || strings.Contains(e, "gave up after") {
			t.Errorf("Event %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no failure")
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.got) != 0 {
		t.Errorf("posted %d times to a refused address", len(hook.got))
	}
}
