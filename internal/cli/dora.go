package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dora"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// DoraReport is what `dora -o json` prints: the measures (internal/dora's Report), and how many
// pieces of evidence were skipped because they do not verify.
type DoraReport struct {
	dora.Report
	// SkippedCount is len(Skipped).
	SkippedCount int `json:"skippedCount"`
	// Preparations counts the Preparations whose artifacts were read.
	Preparations int `json:"preparations"`
}

func newDoraCommand(o *options) *cobra.Command {
	var output, since, until, environment string
	var allNamespaces bool
	var keyFiles []string
	cmd := &cobra.Command{
		Use:   "dora [ORDER]",
		Short: "Delivery measures (deployments, lead time, change failure rate, time to restore) from signed records",
		Long: `Compute the four DORA delivery measures of each Order and Environment over a window,
from the signed evidence Kokumi attaches to the Preparations' artifacts, and from nothing else:

  deployments          the first deployment record of the whole Environment of each Preparation
                       (later records of it, and records of a wave, are not new deployments)
  lead time            from the start of the render that made the Preparation (its signed
                       provenance's startedOn) to that record
  change failure rate  failures over roll-outs: a failure is a roll-out that halted, rolled back
                       or was aborted (a signed roll-out failure) or a release revoked after it
                       was Deployed (a signed revocation); roll-outs are the deployments and the
                       roll-outs that failed
  time to restore      from a failure to the next deployment record of that Environment and Order

Every piece of evidence is read from the registry and verified with Kokumi's trusted public
keys (the ConfigMap kokumi-public-keys of --kokumi-namespace, or --key): what does not verify
counts for nothing, and the output says how many were skipped and why. The measures reach as far
back as the Order keeps its Preparations (the controller's --preparation-history).`,
		Example: `  # The Orders of namespace shop over the last 30 days
  kubectl kokumi dora -n shop

  # The Order web in prod over the last week, for scripts
  kubectl kokumi dora web -n shop --environment prod --since 7d -o json

  # A calendar month, in every namespace you may read
  kubectl kokumi dora -A --since 2026-01-01 --until 2026-02-01

  # With the public keys in a file (kokumi public-key --all > keys.pub), when you may not read them
  kubectl kokumi dora web -n shop --key keys.pub`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("too many arguments (%s): usage: %s [ORDER] (see --help)", strings.Join(args[1:], " "), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			now := time.Now().UTC()
			to, err := parseUntil(until, now)
			if err != nil {
				return err
			}
			from, err := parseSince(since, to)
			if err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			order := ""
			if len(args) == 1 {
				order = args[0]
				if allNamespaces {
					return errors.New("an ORDER is of one namespace: drop -A, or drop ORDER to see every Order")
				}
			}
			if allNamespaces {
				ns = ""
			}
			ctx := cmd.Context()
			keys, err := o.trustedKeys(ctx, c, keyFiles)
			if err != nil {
				return err
			}
			preps, err := doraPreparations(ctx, c, ns, order)
			if err != nil {
				return err
			}
			evidence, err := o.readEvidence(ctx, c, cmd.Flags().Changed("bundled-registry"), preps, keys)
			if err != nil {
				return err
			}
			rep := dora.Compute(evidence, from, to)
			if environment != "" {
				rep.Measures = slices.DeleteFunc(rep.Measures, func(m dora.Measures) bool { return m.Environment != environment })
			}
			out := DoraReport{Report: rep, SkippedCount: len(rep.Skipped), Preparations: len(preps)}
			return printDora(o.streams.Out, out, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	cmd.Flags().StringVar(&since, "since", "30d", "start of the window: a duration back from --until (30d, 2w, 12h) or a date (2026-01-01, or RFC 3339)")
	cmd.Flags().StringVar(&until, "until", "", "end of the window: a date (2026-02-01, or RFC 3339); default now")
	cmd.Flags().StringVar(&environment, "environment", "", "only this Environment")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "the Orders of every namespace you may list Preparations of")
	cmd.Flags().StringSliceVar(&keyFiles, "key", nil, "a file of trusted public keys (PEM, as kokumi public-key --all prints them) instead of the ConfigMap kokumi-public-keys; repeatable")
	return cmd
}

// parseUntil reads --until: a date, or now when empty.
func parseUntil(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now, nil
	}
	if t, ok := parseDate(v); ok {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--until %q is not a date: write 2026-02-01 or 2026-02-01T00:00:00Z", v)
}

// parseSince reads --since: a duration back from until (Nd, Nw, or a Go duration such as 12h),
// or a date.
func parseSince(v string, until time.Time) (time.Time, error) {
	bad := fmt.Errorf("--since %q is neither a duration back (30d, 2w, 12h) nor a date (2026-01-01)", v)
	if t, ok := parseDate(v); ok {
		if !t.Before(until) {
			return time.Time{}, fmt.Errorf("--since %s is not before the end of the window (%s)", t.Format(timeFormat), until.Format(timeFormat))
		}
		return t, nil
	}
	var d time.Duration
	switch {
	case strings.HasSuffix(v, "d") || strings.HasSuffix(v, "w"):
		n, err := strconv.Atoi(v[:len(v)-1])
		if err != nil {
			return time.Time{}, bad
		}
		d = time.Duration(n) * 24 * time.Hour
		if strings.HasSuffix(v, "w") {
			d *= 7
		}
	default:
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return time.Time{}, bad
		}
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("--since %q: the window must be longer than zero", v)
	}
	return until.Add(-d), nil
}

// parseDate reads 2026-01-02 (midnight UTC) or RFC 3339.
func parseDate(v string) (time.Time, bool) {
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t.UTC(), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), true
	}
	return time.Time{}, false
}

// trustedKeys are the keys of files, or else those of Kokumi's ConfigMap kokumi-public-keys.
func (o *options) trustedKeys(ctx context.Context, c client.Client, files []string) (record.TrustedKeys, error) {
	if len(files) > 0 {
		var pems [][]byte
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return record.TrustedKeys{}, fmt.Errorf("read --key: %w", err)
			}
			pems = append(pems, data)
		}
		keys, err := record.ParseTrustedKeys(pems...)
		if err != nil {
			return record.TrustedKeys{}, fmt.Errorf("read --key: %w", err)
		}
		return keys, nil
	}
	keys, err := (&record.Keys{Client: c, Namespace: o.kokumiNamespace}).Trusted(ctx)
	switch {
	case apierrors.IsForbidden(errors.Unwrap(err)) || apierrors.IsForbidden(err):
		return record.TrustedKeys{}, fmt.Errorf("you may not read Kokumi's public keys (ConfigMap %s/%s): ask an admin for them (kokumi public-key --all > keys.pub) and pass the file with --key", o.kokumiNamespace, record.ConfigMapName)
	case err != nil:
		return record.TrustedKeys{}, err
	case keys.Len() == 0:
		return record.TrustedKeys{}, fmt.Errorf("the ConfigMap %s/%s of Kokumi's public keys lists no key: Kokumi has signed nothing yet, or runs in another namespace (see --kokumi-namespace)", o.kokumiNamespace, record.ConfigMapName)
	}
	return keys, nil
}

// doraPreparations lists the Preparations of order in ns (every Order with order empty; every
// namespace with ns empty).
func doraPreparations(ctx context.Context, c client.Client, ns, order string) ([]v1.Preparation, error) {
	if order != "" {
		if _, err := getOrder(ctx, c, ns, order); err != nil {
			return nil, err
		}
		return preparationsOf(ctx, c, ns, order)
	}
	var list v1.PreparationList
	opts := []client.ListOption{}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		where := ns
		if where == "" {
			where = "*"
		}
		return nil, explain(kindPreparation, "list", where, "*", err)
	}
	return list.Items, nil
}

// readEvidence reads and verifies what each Preparation's artifact carries
// (record.Store.Evidence) and keeps what counts (dora.FromAttested).
func (o *options) readEvidence(ctx context.Context, c client.Client, moved bool, preps []v1.Preparation, keys record.TrustedKeys) ([]dora.Evidence, error) {
	if len(preps) == 0 {
		return nil, nil
	}
	ptrs := make([]*v1.Preparation, len(preps))
	for i := range preps {
		ptrs[i] = &preps[i]
	}
	reg, err := o.artifactClient(ctx, c, moved, ptrs...)
	if err != nil {
		return nil, err
	}
	store := &record.Store{Client: reg.client}
	out := make([]dora.Evidence, 0, len(preps))
	for _, p := range ptrs {
		repository, digest := reg.location(p)
		if digest == "" {
			continue // no artifact yet: no evidence
		}
		a, err := store.Evidence(ctx, repository, digest, keys)
		if err != nil {
			return nil, reg.readHint(fmt.Errorf("read the evidence of Preparation %s/%s from %s@%s: %w", p.Namespace, p.Name, repository, digest, err), repository)
		}
		out = append(out, dora.FromAttested(p.Namespace, p.Spec.OrderRef.Name, p.Name, a))
	}
	return out, nil
}

// readHint adds what to do to an error reading repository: plain HTTP, or the bundled registry
// unreachable from here.
func (a *artifacts) readHint(err error, repository string) error {
	host := registryHost(repository)
	if !a.client.UsesPlainHTTP(host) && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w (the registry speaks plain HTTP: add --registry-insecure)", err)
	}
	var netErr *net.OpError
	if a.bundled[host] && !a.moved && errors.As(err, &netErr) {
		return fmt.Errorf(`%w.
Kokumi's bundled registry at %s cannot be reached from here: it runs inside the cluster. Port-forward it and name it with --bundled-registry:

  kubectl -n %s port-forward service/kokumi-registry 5000:5000 &
  kubectl kokumi dora --bundled-registry localhost:5000`, err, host, a.kokumiNamespace)
	}
	return err
}

// printDora prints the report as a table, or as JSON or YAML.
func printDora(out io.Writer, rep DoraReport, output string) error {
	if done, err := printStructured(out, rep, output); done {
		return err
	}
	w := &errWriter{w: out}
	w.printf("Delivery from %s to %s, from verified evidence of %d Preparations.\n", rep.Since.Format(timeFormat), rep.Until.Format(timeFormat), rep.Preparations)
	if len(rep.Measures) == 0 {
		w.printf("No deployment or failure in that window (widen it with --since, e.g. --since 90d).\n")
	} else {
		tw := printers.GetNewTabWriter(out)
		tw2 := &errWriter{w: tw}
		tw2.printf("NAMESPACE\tORDER\tENVIRONMENT\tDEPLOYMENTS\tPER DAY\tLEAD TIME (MEDIAN)\tCHANGE FAILURE RATE\tFAILURES\tTIME TO RESTORE (MEDIAN)\tUNRESTORED\n")
		for _, m := range rep.Measures {
			tw2.printf("%s\t%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%s\t%d\n", m.Namespace, m.Order, m.Environment, m.Deployments, m.PerDay,
				summaryOf(m.LeadTime, m.Deployments), rateOf(m), failuresOf(m), summaryOf(m.TimeToRestore, -1), m.Unrestored)
		}
		if tw2.err != nil {
			return tw2.err
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch len(rep.Skipped) {
	case 0:
		w.printf("Skipped 0: every piece of evidence verified.\n")
	default:
		w.printf("Skipped %d that did not verify (not counted):\n", len(rep.Skipped))
		for _, s := range rep.Skipped {
			w.printf("  %s %s: %s\n", s.Preparation, shortDigest(s.Digest), s.Problem)
		}
	}
	return w.err
}

// summaryOf prints a Summary's median, and of how many (of of, when of >= 0).
func summaryOf(s dora.Summary, of int) string {
	if s.Count == 0 {
		return "-"
	}
	if of >= 0 && of != s.Count {
		return fmt.Sprintf("%s (%d of %d)", shortDuration(s.Median), s.Count, of)
	}
	return fmt.Sprintf("%s (%d)", shortDuration(s.Median), s.Count)
}

// rateOf prints the change failure rate: "62% (5 of 8)".
func rateOf(m dora.Measures) string {
	if m.Rollouts == 0 {
		return fmt.Sprintf("- (%d failures, no roll-out)", m.FailureCount)
	}
	return fmt.Sprintf("%.0f%% (%d of %d)", m.ChangeFailureRate*100, m.FailureCount, m.Rollouts)
}

// failuresOf prints the failures by kind: "halted 2, revoked 1".
func failuresOf(m dora.Measures) string {
	var parts []string
	for _, k := range dora.FailureKinds {
		if n := m.Failures[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// shortDuration prints a duration in days, hours and minutes: "1d15h", "4h", "20m", "45s".
func shortDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	d = d.Round(time.Minute)
	days, hours, minutes := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour), int(d%time.Hour/time.Minute)
	var b strings.Builder
	if days > 0 {
		fmt.Fprintf(&b, "%dd", days)
	}
	if hours > 0 {
		fmt.Fprintf(&b, "%dh", hours)
	}
	if minutes > 0 && days == 0 {
		fmt.Fprintf(&b, "%dm", minutes)
	}
	if b.Len() == 0 {
		return "0m"
	}
	return b.String()
}
