package bench

import (
	"github.com/kokumi-dev/kokumi/internal/text"

	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Header is the table's header and separator lines.
const Header = "| N | bare client creates N | bare client patches N | bare client deletes N | bare client onboards N Clusters | bare client offboards N Clusters | ApplicationSet | Kokumi Serving → N Applications | change → N at new digest | Order deleted → 0 | all Clusters Ready | Clusters deleted → 0 | writes in a quiet minute | Kokumi CPU in it | health change → status p50 | Kokumi RSS |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// RatioHeader is the header of the ratios' table.
const RatioHeader = "| N | Serving → N / bare creates | change → N / bare patches | Order deleted → 0 / bare deletes | all Clusters Ready / bare onboards | Clusters deleted → 0 / bare offboards | ApplicationSet / bare creates |\n|---:|---:|---:|---:|---:|---:|---:|\n"

// CPUHeader is the header of the table of CPU time per Application.
const CPUHeader = "| N | bare client per create | Kokumi per Application created | ratio | bare client per patch | Kokumi per Application changed | ratio | bare client per delete | Kokumi per Application deleted | ratio | Kokumi idle (probes) | Kokumi peak RSS |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// CPUMarkdown is the row's CPU time per Application as a line of its table.
func (r Row) CPUMarkdown() string {
	per := func(d time.Duration) string {
		if d <= 0 || r.N <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)/float64(r.N))
	}
	peak := "–"
	if r.Memory.HWM > 0 {
		peak = mib(r.Memory.HWM)
	}
	idle := "–"
	if rate := r.IdleRate(); rate > 0 {
		idle = fmt.Sprintf("%.0f ms/s", 1000*rate)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", text.Thousands(r.N),
		per(r.BareCPU), per(r.ServingCPU), times(ratio(r.ServingCPU, r.BareCPU)),
		per(r.BarePatchCPU), per(r.ChangeCPU), times(ratio(r.ChangeCPU, r.BarePatchCPU)),
		per(r.BareDeleteCPU), per(r.DeletedCPU), times(ratio(r.DeletedCPU, r.BareDeleteCPU)), idle, peak)
}

// IdleRate is the CPU the controller spends a second with nothing to write: over the quiet
// window when it was measured (a settled fleet: its probes), else over IdleWindow after the
// Clusters were Ready (which may still hold the onboarding's last work); 0 when neither was.
func (r Row) IdleRate() float64 {
	if r.QuietCPU > 0 && r.Quiet > 0 {
		return r.QuietCPU.Seconds() / r.Quiet.Seconds()
	}
	return r.IdleCPU.Seconds() / IdleWindow.Seconds()
}

// NetCPU is the controller's CPU in a phase of duration d that took cpu, less what its probes
// take over d at IdleRate: what the writes cost it (cpu when not measured).
func (r Row) NetCPU(cpu, d time.Duration) time.Duration {
	if r.IdleRate() <= 0 || cpu <= 0 {
		return cpu
	}
	return max(cpu-time.Duration(r.IdleRate()*d.Seconds()*float64(time.Second)), 0)
}

// HealthP50 is the median time a health change took to reach the Serving's status (0 when
// not measured).
func (r Row) HealthP50() time.Duration {
	if len(r.Health) == 0 {
		return 0
	}
	return r.Health[len(r.Health)/2]
}

// Markdown is the row as a line of the table.
func (r Row) Markdown() string {
	quiet := "–"
	if r.QuietWrites >= 0 {
		quiet = fmt.Sprintf("%d", r.QuietWrites)
		if r.Quiet > 0 && (r.Quiet < 59*time.Second || r.Quiet > 61*time.Second) {
			quiet += fmt.Sprintf(" (in %s)", r.Quiet.Round(time.Second))
		}
	}
	rss := "–"
	if r.Memory.RSS > 0 {
		rss = fmt.Sprintf("%s (peak %s)", mib(r.Memory.RSS), mib(r.Memory.HWM))
	}
	health := "–"
	if len(r.Health) > 0 {
		health = fmt.Sprintf("%d ms", r.HealthP50().Milliseconds())
	}
	cpu := "–"
	if r.QuietCPU > 0 {
		cpu = secs(r.QuietCPU)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", text.Thousands(r.N),
		secs(r.Bare), secs(r.BarePatch), secs(r.BareDelete), secs(r.BareOnboard), secs(r.BareOffboard), secs(r.AppSet),
		secs(r.Serving), secs(r.Change), secs(r.Deleted), secs(r.ClustersReady), secs(r.Offboarded), quiet, cpu, health, rss)
}

// RatioMarkdown is the row's ratios to the bare client as a line of the ratios' table.
func (r Row) RatioMarkdown() string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |\n", text.Thousands(r.N), times(r.ServingRatio()), times(r.ChangeRatio()),
		times(r.DeleteRatio()), times(r.OnboardRatio()), times(r.OffboardRatio()), times(ratio(r.AppSet, r.Bare)))
}

// Details says what the table leaves out: why a column is missing, the quiet window's writes
// by verb and resource, and the notes.
func (r Row) Details() string {
	var b strings.Builder
	if r.AppSet == 0 && r.AppSetNote != "" {
		fmt.Fprintf(&b, "- N = %s: ApplicationSet not measured: %s\n", text.Thousands(r.N), r.AppSetNote)
	}
	if len(r.QuietBy) > 0 {
		fmt.Fprintf(&b, "- N = %s: the quiet minute's writes: %s\n", text.Thousands(r.N), byVerb(r.QuietBy))
	}
	if r.QuietCPU > 0 {
		fmt.Fprintf(&b, "- N = %s: the controller's CPU in the quiet window (its Cluster probes, mostly): %s, %.0f%% of one core\n",
			text.Thousands(r.N), r.QuietCPU.Round(10*time.Millisecond), 100*float64(r.QuietCPU)/float64(r.Quiet))
	}
	if len(r.Health) > 0 {
		fmt.Fprintf(&b, "- N = %s: %d health changes (one Application Degraded, then Healthy) reached the Serving's status in p50 %d ms, p90 %d ms, max %d ms\n",
			text.Thousands(r.N), len(r.Health), r.HealthP50().Milliseconds(), r.Health[len(r.Health)*9/10].Milliseconds(), r.Health[len(r.Health)-1].Milliseconds())
	}
	if r.IdleRate() > 0 && r.N > 0 {
		net := func(cpu, d, bare time.Duration) string {
			n := r.NetCPU(cpu, d)
			return fmt.Sprintf("%.3f ms (%s)", float64(n)/float64(time.Millisecond)/float64(r.N), times(ratio(n, bare)))
		}
		fmt.Fprintf(&b, "- N = %s: the controller's CPU per Application less its probes' at the idle rate (%.0f ms/s) over the phase: created %s, changed %s, deleted %s\n",
			text.Thousands(r.N), 1000*r.IdleRate(), net(r.ServingCPU, r.Serving, r.BareCPU), net(r.ChangeCPU, r.Change, r.BarePatchCPU), net(r.DeletedCPU, r.Deleted, r.BareDeleteCPU))
	}
	for _, p := range r.PhaseWrites {
		cpu := ""
		if p.KokumiCPU > 0 || p.APICPU > 0 {
			cpu = fmt.Sprintf("; CPU: the controller %s, the API server %s, the benchmark's process (its observer, the members' server) %s", secs(p.KokumiCPU), secs(p.APICPU), secs(p.BenchCPU))
		}
		fmt.Fprintf(&b, "- N = %s: the controller's writes during %s: %d (%s)%s\n", text.Thousands(r.N), p.Phase, p.Total, byVerb(p.By), cpu)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- N = %s: %s\n", text.Thousands(r.N), n)
	}
	return b.String()
}

// Table renders rows as the two tables and their details.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString(Header)
	for _, r := range rows {
		b.WriteString(r.Markdown())
	}
	b.WriteString("\nRatios to the bare client doing the same writes (lower is better; 1.0× is as fast as 16 workers writing the same objects):\n\n")
	b.WriteString(RatioHeader)
	for _, r := range rows {
		b.WriteString(r.RatioMarkdown())
	}
	b.WriteString("\nCPU time per Application (user + system, from /proc): the controller's over each phase, the bare client's process over its same writes (the writes and an informer that sees each one, as the controller sees its own), the controller's CPU with nothing to write (its probes of the N Clusters, which run through every phase), and its peak RSS until after the quiet window:\n\n")
	b.WriteString(CPUHeader)
	for _, r := range rows {
		b.WriteString(r.CPUMarkdown())
	}
	var details strings.Builder
	for _, r := range rows {
		details.WriteString(r.Details())
	}
	if details.Len() > 0 {
		b.WriteString("\n")
		b.WriteString(details.String())
	}
	return b.String()
}

func secs(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func times(f float64) string {
	if f <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", f)
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// byVerb lists counts by verb and resource, sorted.
func byVerb(by map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// RolloutHeader is the header of the roll-out table (RunRollout).
const RolloutHeader = "| N | waves: canary + rest (rest's maxUnavailable) | canary soak | health delay × batches | all at once | two waves | ideal | overhead | two waves / ideal | rest started after canary healthy | most of rest unavailable at once |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// Markdown is the roll-out row as a line of its table.
func (r RolloutRow) Markdown() string {
	started, most := "–", "–"
	if r.RestStarted > 0 && r.CanaryHealthy > 0 {
		started = secs(r.RestStarted - r.CanaryHealthy)
	}
	if r.Waves > 0 {
		most = fmt.Sprintf("%d (limit %d)", r.MostUnavailable, r.MaxUnavailable)
	}
	overhead := "–"
	if r.Waves > 0 && r.Ideal() > 0 {
		overhead = fmt.Sprintf("%+.2f s", r.Overhead().Seconds())
	}
	return fmt.Sprintf("| %s | %d + %d (%d) | %s | %d ms × %d | %s | %s | %s | %s | %s | %s | %s |\n", text.Thousands(r.N), r.Canary, r.Rest, r.MaxUnavailable,
		r.Soak, r.HealthDelay.Milliseconds(), r.Batches, secs(r.AllAtOnce), secs(r.Waves), secs(r.Ideal()), overhead,
		times(ratio(r.Waves, r.Ideal())), started, most)
}

// RolloutTable renders roll-out rows as a table, what it means, and their notes.
func RolloutTable(rows []RolloutRow) string {
	var b strings.Builder
	b.WriteString("Roll-out in two waves against all at once (the same Serving promoted to a new Preparation; the harness reports each Application Synced and Healthy the health delay after Kokumi points it at the new revision; ideal = all at once + soak + (batches − 1) × health delay):\n\n")
	b.WriteString(RolloutHeader)
	for _, r := range rows {
		b.WriteString(r.Markdown())
	}
	var notes strings.Builder
	for _, r := range rows {
		if r.Waves > 0 && r.InOrder() {
			fmt.Fprintf(&notes, "- N = %s: after the promotion, the canary wave was healthy in %s, the rest wave's first Application was pointed at the new revision %s after that (the soak is %s), and the Serving was Deployed %s after that\n",
				text.Thousands(r.N), secs(r.CanaryHealthy), secs(r.RestStarted-r.CanaryHealthy), r.Soak, secs(r.Waves-r.RestStarted))
		}
		if r.Waves > 0 && !r.InOrder() {
			fmt.Fprintf(&notes, "- N = %s: the rest wave started before the canary wave was healthy and had soaked\n", text.Thousands(r.N))
		}
		if r.Waves > 0 && r.MostUnavailable > r.MaxUnavailable {
			fmt.Fprintf(&notes, "- N = %s: %d clusters of the rest wave were unavailable at once, more than its maxUnavailable %d\n", text.Thousands(r.N), r.MostUnavailable, r.MaxUnavailable)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&notes, "- N = %s: %s\n", text.Thousands(r.N), n)
		}
	}
	if notes.Len() > 0 {
		b.WriteString("\n")
		b.WriteString(notes.String())
	}
	return b.String()
}
