package rollout

import (
	"fmt"
	"time"
	_ "time/tzdata" // the windows' time zones come with the binary, whatever the image has

	"github.com/robfig/cron/v3"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the rule of a roll-out policy's windows (spec.rollout.windows): whether a wave
// may start at a moment, and when one next may.

// cronFields reads the five fields of a window's schedule (and the @daily descriptors).
var cronFields = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// windowHorizon is how far ahead NextOpen looks for an open window.
const windowHorizon = 366 * 24 * time.Hour

// window is one parsed RolloutWindow.
type window struct {
	schedule cron.Schedule
	location *time.Location
	duration time.Duration
}

// Windows are a roll-out policy's windows, parsed.
type Windows struct {
	allow, deny []window
}

// ParseWindows reads a policy's windows. An error names the field, what is wrong and how to
// fix it: while it stands, no wave starts (a window that cannot be read allows nothing).
func ParseWindows(ws []v1.RolloutWindow) (*Windows, error) {
	out := &Windows{}
	for i, w := range ws {
		field := fmt.Sprintf("spec.rollout.windows[%d]", i)
		schedule, err := cronFields.Parse(w.Schedule)
		if err != nil {
			return nil, fmt.Errorf("%s.schedule %q is not a cron schedule of five fields (minute hour day-of-month month day-of-week), such as \"0 22 * * 1-5\": %w", field, w.Schedule, err)
		}
		location := time.UTC
		if w.TimeZone != "" {
			if location, err = time.LoadLocation(w.TimeZone); err != nil {
				return nil, fmt.Errorf("%s.timeZone %q is not an IANA time zone, such as Europe/Paris: %w", field, w.TimeZone, err)
			}
		}
		if w.Duration.Duration <= 0 {
			return nil, fmt.Errorf("%s.duration %s: a window stays open for more than 0, such as 8h", field, w.Duration.Duration)
		}
		pw := window{schedule: schedule, location: location, duration: w.Duration.Duration}
		if w.Kind == v1.WindowDeny {
			out.deny = append(out.deny, pw)
		} else {
			out.allow = append(out.allow, pw)
		}
	}
	return out, nil
}

// openAt says whether the window is open at t, and until when.
func (w window) openAt(t time.Time) (bool, time.Time) {
	local := t.In(w.location)
	// The last opening before t, if the window is open, is the first after t-duration.
	start := w.schedule.Next(local.Add(-w.duration))
	if start.IsZero() || start.After(local) {
		return false, time.Time{}
	}
	return true, start.Add(w.duration)
}

// anyOpen says whether one of ws is open at t, and until when the latest of those open is.
func anyOpen(ws []window, t time.Time) (bool, time.Time) {
	open, until := false, time.Time{}
	for _, w := range ws {
		if o, end := w.openAt(t); o {
			open = true
			if end.After(until) {
				until = end
			}
		}
	}
	return open, until
}

// Open says whether a wave may start at t: inside an Allow window (when there is one), and in
// no Deny window.
func (w *Windows) Open(t time.Time) bool {
	if w == nil {
		return true
	}
	if denied, _ := anyOpen(w.deny, t); denied {
		return false
	}
	if len(w.allow) == 0 {
		return true
	}
	allowed, _ := anyOpen(w.allow, t)
	return allowed
}

// NextOpen returns the first moment from t on at which a wave may start, or false when none
// comes within a year.
func (w *Windows) NextOpen(t time.Time) (time.Time, bool) {
	at := t
	for i := 0; i < 1000 && at.Sub(t) < windowHorizon; i++ {
		if w.Open(at) {
			return at, true
		}
		if denied, until := anyOpen(w.deny, at); denied {
			at = until
			continue
		}
		// Closed for want of an Allow window: the next one that opens.
		next := time.Time{}
		for _, a := range w.allow {
			if s := a.schedule.Next(at.In(a.location)); !s.IsZero() && (next.IsZero() || s.Before(next)) {
				next = s
			}
		}
		if next.IsZero() {
			return time.Time{}, false
		}
		at = next
	}
	return time.Time{}, false
}
