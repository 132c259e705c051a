package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func newDiffCommand(o *options) *cobra.Command {
	var manifests bool
	cmd := &cobra.Command{
		Use:   "diff PREP_A PREP_B",
		Short: "Show what changes if PREP_B is promoted over PREP_A",
		Long: `Compare two Preparations of a namespace: what changes if PREP_B is promoted over
PREP_A. Without flags it compares what the Preparations record: the source (URL,
version, resolved digest), the target namespace, the config hash and every image with
the digest it was pinned to (added, removed, changed; an image is matched by its
repository, so a new tag of the same image shows as changed).

With --manifests it also pulls both artifacts from the registry their spec.artifact.ref
names (by digest), signed in with your docker config's credentials (docker login, or a
credential helper), and prints a unified diff of the rendered manifests, object by
object. Use --registry-insecure for a registry that speaks plain HTTP.`,
		Example: `  # What changes between web-5b2a and web-7c9f?
  kubectl kokumi diff web-5b2a web-7c9f -n shop

  # With the rendered manifests, from a registry reached over plain HTTP
  kubectl kokumi diff web-5b2a web-7c9f -n shop --manifests --registry-insecure`,
		Args: exactArgs("prep_a", "prep_b"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			a, err := getPreparation(ctx, c, ns, args[0])
			if err != nil {
				return err
			}
			b, err := getPreparation(ctx, c, ns, args[1])
			if err != nil {
				return err
			}
			if err := printSpecDiff(o.streams.Out, a, b); err != nil {
				return err
			}
			if !manifests {
				return nil
			}
			return o.printManifestsDiff(ctx, o.streams.Out, a, b)
		},
	}
	cmd.Flags().BoolVar(&manifests, "manifests", false, "pull both artifacts and diff their rendered manifests")
	return cmd
}

// printSpecDiff prints what the two Preparations record, a → b.
func printSpecDiff(out io.Writer, a, b *v1.Preparation) error {
	w := &errWriter{w: out}
	w.printf("Preparation %s → %s\n", a.Name, b.Name)
	if a.Spec.OrderRef.Name != b.Spec.OrderRef.Name {
		w.printf("  Note: they belong to different Orders (%s, %s): only %s's Serving may deploy %s\n", a.Spec.OrderRef.Name, b.Spec.OrderRef.Name, b.Spec.OrderRef.Name, b.Name)
	}
	field := func(label, x, y string) {
		if x == y {
			w.printf("  %-18s %s (unchanged)\n", label+":", orNone(x))
			return
		}
		w.printf("  %-18s %s → %s\n", label+":", orNone(x), orNone(y))
	}
	field("source URL", a.Spec.Source.URL, b.Spec.Source.URL)
	field("source version", a.Spec.Source.Version, b.Spec.Source.Version)
	field("source digest", a.Spec.Source.Digest, b.Spec.Source.Digest)
	field("target namespace", a.Spec.TargetNamespace, b.Spec.TargetNamespace)
	field("config hash", a.Spec.ConfigHash, b.Spec.ConfigHash)
	field("artifact", a.Spec.Artifact.Digest, b.Spec.Artifact.Digest)

	changes, unchanged := diffImages(a.Spec.Images, b.Spec.Images)
	counts := map[byte]int{}
	for _, c := range changes {
		counts[c.op]++
	}
	w.printf("Images: %d changed, %d added, %d removed, %d unchanged\n", counts['~'], counts['+'], counts['-'], unchanged)
	for _, c := range changes {
		switch c.op {
		case '~':
			w.printf("  ~ %s\n      - %s → %s\n      + %s → %s\n", c.repository, c.a.Original, pinnedDigest(c.a.Pinned), c.b.Original, pinnedDigest(c.b.Pinned))
		case '+':
			w.printf("  + %s → %s\n", c.b.Original, pinnedDigest(c.b.Pinned))
		case '-':
			w.printf("  - %s → %s\n", c.a.Original, pinnedDigest(c.a.Pinned))
		}
	}
	return w.err
}

// imageChange is one image that differs: ~ changed, + added, - removed.
type imageChange struct {
	op         byte
	repository string
	a, b       v1.ImagePin
}

// diffImages matches the images of a and b by repository and returns the differences,
// sorted by repository, and how many are the same.
func diffImages(a, b []v1.ImagePin) ([]imageChange, int) {
	index := func(pins []v1.ImagePin) map[string]v1.ImagePin {
		m := make(map[string]v1.ImagePin, len(pins))
		for _, p := range pins {
			m[imageRepository(p.Original)] = p
		}
		return m
	}
	ia, ib := index(a), index(b)
	var out []imageChange
	unchanged := 0
	for repo, pa := range ia {
		pb, ok := ib[repo]
		switch {
		case !ok:
			out = append(out, imageChange{op: '-', repository: repo, a: pa})
		case pa.Original != pb.Original || pa.Pinned != pb.Pinned:
			out = append(out, imageChange{op: '~', repository: repo, a: pa, b: pb})
		default:
			unchanged++
		}
	}
	for repo, pb := range ib {
		if _, ok := ia[repo]; !ok {
			out = append(out, imageChange{op: '+', repository: repo, b: pb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].repository < out[j].repository })
	return out, unchanged
}

// imageRepository is an image reference without its tag and digest.
func imageRepository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// pinnedDigest is the digest of a pinned reference (repo@sha256:…), or the reference.
func pinnedDigest(ref string) string {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

// printManifestsDiff pulls both artifacts and prints a unified diff of each object that
// differs.
func (o *options) printManifestsDiff(ctx context.Context, out io.Writer, a, b *v1.Preparation) error {
	ra, _ := artifactOf(a)
	rb, _ := artifactOf(b)
	reg := o.registryClient(registryHost(ra), registryHost(rb))
	ma, err := pullManifests(ctx, reg, a)
	if err != nil {
		return err
	}
	mb, err := pullManifests(ctx, reg, b)
	if err != nil {
		return err
	}
	oa, err := objectsOf(a.Name, ma)
	if err != nil {
		return err
	}
	ob, err := objectsOf(b.Name, mb)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(oa)+len(ob))
	for k := range oa {
		keys = append(keys, k)
	}
	for k := range ob {
		if _, ok := oa[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var changed, added, removed int
	var body strings.Builder
	for _, k := range keys {
		x, inA := oa[k]
		y, inB := ob[k]
		if x == y {
			continue
		}
		from, to := a.Name+"/"+k, b.Name+"/"+k
		switch {
		case !inA:
			added++
			from = "/dev/null"
		case !inB:
			removed++
			to = "/dev/null"
		default:
			changed++
		}
		text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: lines(x), B: lines(y), FromFile: from, ToFile: to, Context: 3,
		})
		if err != nil {
			return fmt.Errorf("diff %s: %w", k, err)
		}
		body.WriteString(text)
	}
	w := &errWriter{w: out}
	w.printf("Manifests (objects): %d changed, %d added, %d removed, %d unchanged\n", changed, added, removed, len(keys)-changed-added-removed)
	w.printf("%s", body.String())
	return w.err
}

// lines splits text into lines, each with its newline; none for no text.
func lines(text string) []string {
	if text == "" {
		return nil
	}
	return difflib.SplitLines(strings.TrimSuffix(text, "\n"))
}
