package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func mustParse(t *testing.T, ws ...v1.RolloutWindow) *Windows {
	t.Helper()
	w, err := ParseWindows(ws)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAnAllowWindowOpensOnItsScheduleInItsTimeZone(t *testing.T) {
	// 22:00 to 06:00 in Paris, Monday to Friday; Paris is UTC+1 in December.
	w := mustParse(t, v1.RolloutWindow{Schedule: "0 22 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}, TimeZone: "Europe/Paris"})
	cases := []struct {
		at   string
		open bool
	}{
		{"2026-12-07T20:59:00Z", false}, // Monday 21:59 in Paris
		{"2026-12-07T21:00:00Z", true},  // Monday 22:00 in Paris
		{"2026-12-08T04:59:00Z", true},  // Tuesday 05:59 in Paris
		{"2026-12-08T05:00:00Z", false}, // Tuesday 06:00 in Paris: closed
		{"2026-12-05T22:00:00Z", false}, // Saturday
	}
	for _, c := range cases {
		if got := w.Open(at(t, c.at)); got != c.open {
			t.Errorf("open at %s = %v, want %v", c.at, got, c.open)
		}
	}
	next, ok := w.NextOpen(at(t, "2026-12-05T12:00:00Z")) // Saturday noon
	if want := at(t, "2026-12-07T21:00:00Z"); !ok || !next.Equal(want) {
		t.Errorf("next open from Saturday noon = %s, %v; want %s (Monday 22:00 in Paris)", next, ok, want)
	}
}

func TestADenyWindowClosesWhatAnAllowWindowOpens(t *testing.T) {
	w := mustParse(t,
		v1.RolloutWindow{Schedule: "0 8 * * *", Duration: metav1.Duration{Duration: 10 * time.Hour}},
		v1.RolloutWindow{Kind: v1.WindowDeny, Schedule: "0 12 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}},
	)
	if !w.Open(at(t, "2026-12-07T11:59:00Z")) || w.Open(at(t, "2026-12-07T12:30:00Z")) || !w.Open(at(t, "2026-12-07T14:00:00Z")) {
		t.Error("the deny window from 12:00 to 14:00 does not close the allow window from 08:00 to 18:00")
	}
	next, ok := w.NextOpen(at(t, "2026-12-07T12:30:00Z"))
	if want := at(t, "2026-12-07T14:00:00Z"); !ok || !next.Equal(want) {
		t.Errorf("next open inside the deny window = %s, %v; want %s", next, ok, want)
	}
	next, ok = w.NextOpen(at(t, "2026-12-07T19:00:00Z"))
	if want := at(t, "2026-12-08T08:00:00Z"); !ok || !next.Equal(want) {
		t.Errorf("next open after the allow window = %s, %v; want %s", next, ok, want)
	}
	if !mustParse(t).Open(at(t, "2026-12-07T03:00:00Z")) {
		t.Error("no windows must allow any time")
	}
}

func TestAWindowThatCannotBeReadNamesItsFieldAndTheFix(t *testing.T) {
	for _, c := range []struct {
		w    v1.RolloutWindow
		want string
	}{
		{v1.RolloutWindow{Schedule: "every night", Duration: metav1.Duration{Duration: time.Hour}}, `spec.rollout.windows[0].schedule "every night" is not a cron schedule`},
		{v1.RolloutWindow{Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}, `spec.rollout.windows[0].timeZone "Mars/Olympus" is not an IANA time zone, such as Europe/Paris`},
		{v1.RolloutWindow{Schedule: "0 22 * * *"}, "spec.rollout.windows[0].duration 0s: a window stays open for more than 0"},
	} {
		_, err := ParseWindows([]v1.RolloutWindow{c.w})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseWindows(%+v) = %v, want an error with %q", c.w, err, c.want)
		}
	}
	never := mustParse(t, v1.RolloutWindow{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: time.Hour}})
	if _, ok := never.NextOpen(at(t, "2026-12-07T00:00:00Z")); ok {
		t.Error("a window on the 30th of February must never open")
	}
}
