package preparation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestTheSkipRuleChecksTheStatusClaimAndARememberedRenderThatSaysSomethingElse(t *testing.T) {
	withStatus := &v1.Order{Status: v1.OrderStatus{InputsHash: "sha256:a", LatestPreparation: "web-a"}}
	same := Render{Inputs: "sha256:a", Preparation: "web-a"}
	newer := Render{Inputs: "sha256:b", Preparation: "web-b"}
	for _, tc := range []struct {
		name       string
		order      *v1.Order
		last       Render
		remembered bool
		want       []Render
	}{
		{"nothing claimed", &v1.Order{}, Render{}, false, nil},
		{"the status alone", withStatus, Render{}, false, []Render{same}},
		{"a remembered render the status says too", withStatus, same, true, []Render{same}},
		{"a remembered render the cache does not show yet", withStatus, newer, true, []Render{same, newer}},
		{"a remembered render without status", &v1.Order{}, newer, true, []Render{newer}},
		{"a status without a Preparation claims nothing", &v1.Order{Status: v1.OrderStatus{InputsHash: "sha256:a"}}, Render{}, false, nil},
	} {
		got := Candidates(tc.order, tc.last, tc.remembered)
		if len(got) != len(tc.want) {
			t.Errorf("%s: candidates %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: candidates %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

func TestRendersForgetAnOrderMadeAgainUnderItsName(t *testing.T) {
	var r Renders
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	r.Set(key, "uid-1", Render{Inputs: "sha256:a", Preparation: "web-a"})
	if got, ok := r.Get(key, "uid-1"); !ok || got.Preparation != "web-a" {
		t.Errorf("the same Order's last render: %v, %v", got, ok)
	}
	if _, ok := r.Get(key, "uid-2"); ok {
		t.Error("an Order made again under the name has the old Order's render")
	}
	r.Forget(key)
	if _, ok := r.Get(key, "uid-1"); ok {
		t.Error("a forgotten Order still has a render")
	}
}

func TestFindPicksTheOrdersOwnPreparationsOnly(t *testing.T) {
	order := &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "order-uid"}}
	yes := true
	owned := func(name, hash string, created time.Time) v1.Preparation {
		return v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created),
			OwnerReferences: []metav1.OwnerReference{{UID: "order-uid", Controller: &yes}}}, Spec: v1.PreparationSpec{ConfigHash: hash}}
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	stranger := owned("web-x", "h3", t0.Add(time.Hour))
	stranger.OwnerReferences[0].UID = "other"
	preps := []v1.Preparation{owned("web-a", "h1", t0), owned("web-b", "h2", t0.Add(time.Minute)), stranger}

	existing, latest := Find(preps, order, "h1")
	if existing == nil || existing.Name != "web-a" || latest == nil || latest.Name != "web-b" {
		t.Errorf("without a status: existing %v, latest %v; want web-a and the newest, web-b", existing, latest)
	}
	order.Status.LatestPreparation = "web-a"
	if _, latest := Find(preps, order, "h9"); latest == nil || latest.Name != "web-a" {
		t.Errorf("the status names web-a: latest %v", latest)
	}
	if existing, _ := Find(preps, order, "h3"); existing != nil {
		t.Errorf("another owner's Preparation counts as the Order's: %s", existing.Name)
	}
}

func TestRetryWaitsDefaultAndNeverEndBeforeTheFirst(t *testing.T) {
	for _, tc := range []struct{ first, most, wantFirst, wantMost time.Duration }{
		{0, 0, DefaultRetryAfter, DefaultMaxRetryAfter},
		{time.Second, time.Minute, time.Second, time.Minute},
		{time.Hour, 0, time.Hour, time.Hour},
	} {
		if f, m := RetryWaits(tc.first, tc.most); f != tc.wantFirst || m != tc.wantMost {
			t.Errorf("RetryWaits(%s, %s) = %s, %s; want %s, %s", tc.first, tc.most, f, m, tc.wantFirst, tc.wantMost)
		}
	}
}

func TestTheRetryNoteSaysHowOftenAndWhen(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 500, time.UTC)
	retry, msg := RetryNote("1/uid/1", 3, 20*time.Second, now)
	if retry.Input != "1/uid/1" || retry.Failures != 3 || !retry.NotBefore.Time.Equal(time.Date(2030, 1, 1, 0, 0, 21, 0, time.UTC)) {
		t.Errorf("renderRetry %+v", retry)
	}
	if want := "Failed 3 times in a row: Kokumi tries again in 20s, at 2030-01-01T00:00:20Z"; !strings.HasPrefix(msg, want) {
		t.Errorf("message %q, want it to start with %q", msg, want)
	}
	if _, msg := RetryNote("1/uid/1", 1, time.Second, now); !strings.HasPrefix(msg, "Failed once:") {
		t.Errorf("first failure: %q", msg)
	}
}
