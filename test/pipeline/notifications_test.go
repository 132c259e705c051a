package pipeline

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// notificationsAre waits until the condition Notifications of the Environment edge has status
// and reason (an empty reason: no such condition) and a message with each of msgs.
func (f *fixture) notificationsAre(status metav1.ConditionStatus, reason string, msgs ...string) {
	f.t.Helper()
	f.eventually(fmt.Sprintf("Environment edge Notifications %s %s", status, reason), func() error {
		var e v1.Environment
		f.get("edge", &e)
		c := apimeta.FindStatusCondition(e.Status.Conditions, v1.ConditionNotifications)
		switch {
		case reason == "" && c != nil:
			return fmt.Errorf("Notifications is %+v, want none", c)
		case reason == "":
			return nil
		case c == nil || c.Status != status || c.Reason != reason:
			return fmt.Errorf("Notifications is %+v, want %s %s", c, status, reason)
		case c.ObservedGeneration != e.Generation:
			return fmt.Errorf("Notifications observed generation %d, want %d", c.ObservedGeneration, e.Generation)
		}
		for _, m := range msgs {
			if !strings.Contains(c.Message, m) {
				return fmt.Errorf("Notifications message %q does not say %q", c.Message, m)
			}
		}
		return nil
	})
}

// A webhook key is read in Kokumi's namespace only. The Environment says when its key is not
// there (a Secret of that name in its own namespace, which its tenants may write, is not read),
// when its value is no whsec_ key, and when it is made, mended or deleted: the Secret's changes
// alone, without a change of the Environment, move the condition.
func TestAWebhookKeyNotInKokumisNamespaceIsTheEnvironmentsCondition(t *testing.T) {
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, ns: "pipeline-webhook-keys"}
	must(t, env.CreateNamespace(ctx, f.ns))
	name := "keys-" + f.ns
	valid := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Data: map[string][]byte{"chat": []byte(valid)}}))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: f.ns},
		Spec: v1.EnvironmentSpec{Project: "proj-" + f.ns, Notifications: []v1.Notification{
			{Name: "plain", URL: "https://hooks.example.com/plain"},
			{Name: "chat", URL: "https://hooks.example.com/chat", SecretRef: &v1.SecretKeyRef{Name: name, Key: "chat"}},
		}}}))

	f.notificationsAre(metav1.ConditionFalse, v1.ReasonWebhookKeyMissing,
		"Environment "+f.ns+"/edge: spec.notifications[1].secretRef names the Secret "+name+", which is not in Kokumi's namespace "+cfg.Namespace,
		"a Secret of that name in namespace "+f.ns+" is not read",
		"kubectl -n "+cfg.Namespace+" create secret generic "+name+" --from-literal=chat=whsec_$(openssl rand -base64 32)",
		"the webhook chat is sent nothing")

	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace}, Data: map[string][]byte{"chat": []byte("s3cret")}}
	must(t, env.Client.Create(ctx, key))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, key) })
	f.notificationsAre(metav1.ConditionFalse, v1.ReasonWebhookKeyMissing,
		"spec.notifications[1].secretRef names the key chat of the Secret "+cfg.Namespace+"/"+name+", which is no webhook key: the value does not start with whsec_")

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(key), key); err != nil {
			return err
		}
		key.Data["chat"] = []byte(valid)
		return env.Client.Update(ctx, key)
	}))
	f.notificationsAre(metav1.ConditionTrue, v1.ReasonWebhookKeysFound, "the keys of the 1 signed webhooks are in Kokumi's namespace "+cfg.Namespace)

	must(t, env.Client.Delete(ctx, key))
	f.notificationsAre(metav1.ConditionFalse, v1.ReasonWebhookKeyMissing, "names the Secret "+name+", which is not in Kokumi's namespace")

	// Without a signed webhook, there is nothing to say.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		f.get("edge", &e)
		e.Spec.Notifications[1].SecretRef = nil
		return env.Client.Update(ctx, &e)
	}))
	f.notificationsAre("", "")
}
