package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/changes"
)

func newDiffCommand(o *options) *cobra.Command {
	var manifests bool
	cmd := &cobra.Command{
		Use:   "diff PREP_A PREP_B",
		Short: "Show what changes if PREP_B is promoted over PREP_A",
		Long: `Compare two Preparations of a namespace: what changes if PREP_B is promoted over
PREP_A. It begins with a summary (the source version, the values, the images, the
objects), then lists the images that differ and every field the Preparations record.

Without flags it reads only what the Preparations record: the source (URL, version,
resolved digest), the target namespace, the digest of the Product's values, and every
image with the digest it was pinned to (an image is matched by its repository, so a new
tag of the same image shows as changed). A Preparation records neither its values nor
its objects, only their digests: the summary says whether the values changed, and
--manifests compares the objects.

With --manifests it also pulls both artifacts from the registry their spec.artifact.ref
names (by digest) and prints a unified diff of the rendered manifests, object by
object. For Kokumi's bundled registry it signs in as Kokumi's read-only puller, read from
the Secret kokumi-registry-puller of --kokumi-namespace when you may get it (as Kokumi's
UI does); otherwise, and for other registries, with your docker config's credentials
(docker login, or a credential helper). Use --registry-insecure for a registry that
speaks plain HTTP. The values of a rendered Secret are masked (++++++++, its keys kept; a
value that changed gets a longer mask) unless you may get secrets in its namespace (the
target namespace when it names none), as Kokumi's UI masks them; a note on stderr names
the Secrets masked.`,
		Example: `  # What changes between web-5b2a and web-7c9f?
  kubectl kokumi diff web-5b2a web-7c9f -n shop

  # With the rendered manifests, object by object
  kubectl kokumi diff web-5b2a web-7c9f -n shop --manifests`,
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
			var objects *objectsDiff
			var pullErr error
			if manifests {
				// A --bundled-registry of your own (a port-forward) is where the bundled
				// registry's artifacts are read.
				objects, pullErr = o.diffManifests(ctx, c, cmd.Flags().Changed("bundled-registry"), a, b)
			}
			if err := printDiff(o.streams.Out, a, b, manifests, objects); err != nil {
				return err
			}
			return pullErr
		},
	}
	cmd.Flags().BoolVar(&manifests, "manifests", false, "pull both artifacts and diff their rendered manifests, object by object")
	return cmd
}

// objectsDiff is how the rendered objects of two Preparations differ.
type objectsDiff struct {
	changes   []changes.ObjectChange
	unchanged int
}

// printDiff prints what changes from a to b: a summary, the images that differ, the fields
// the Preparations record and, when manifests were compared (objects), each object that
// differs. manifests says whether --manifests was asked, objects is nil when they could not
// be pulled.
func printDiff(out io.Writer, a, b *v1.Preparation, manifests bool, objects *objectsDiff) error {
	w := &errWriter{w: out}
	w.printf("Preparation %s → %s\n", a.Name, b.Name)
	if a.Spec.OrderRef.Name != b.Spec.OrderRef.Name {
		w.printf("Note: they belong to different Orders (%s, %s): only %s's Serving may deploy %s.\n", a.Spec.OrderRef.Name, b.Spec.OrderRef.Name, b.Spec.OrderRef.Name, b.Name)
	}
	images, unchangedImages := changes.Images(a.Spec.Images, b.Spec.Images)

	w.printf("\nWhat changes:\n")
	if a.Spec.Artifact.Digest != "" && a.Spec.Artifact.Digest == b.Spec.Artifact.Digest {
		w.printf("  nothing: both are the same artifact (%s)\n", a.Spec.Artifact.Digest)
	}
	summary := func(label, text string) { w.printf("  %-10s %s\n", label, text) }
	summary("source", sourceChange(a, b))
	switch changes.Values(a, b) {
	case changes.Changed:
		summary("values", "changed (the Product's Helm values, or whether the chart's CRDs render)")
	case changes.Unknown:
		summary("values", "unknown: "+olderOf(a, b)+" rendered before Kokumi recorded the digest of the values")
	default:
		summary("values", "unchanged")
	}
	if a.Spec.TargetNamespace != b.Spec.TargetNamespace {
		summary("namespace", a.Spec.TargetNamespace+" → "+b.Spec.TargetNamespace)
	}
	summary("images", imageCounts(images, unchangedImages))
	switch {
	case objects != nil:
		summary("objects", objectCounts(objects)+" (diff below)")
	case manifests:
		summary("objects", "not compared: the artifacts could not be pulled (see the error below)")
	default:
		summary("objects", "not compared: a Preparation records no list of its objects; add --manifests to pull both artifacts and diff them object by object")
	}

	if len(images) > 0 {
		w.printf("\nImages:\n")
		for _, c := range images {
			w.printf("  %s\n", imageChange(c))
		}
	}

	w.printf("\nRecorded fields:\n")
	field := func(label, x, y string) {
		if x == y {
			w.printf("  %-18s %s (unchanged)\n", label+":", orNone(x))
			return
		}
		w.printf("  %-18s %s → %s\n", label+":", orNone(x), orNone(y))
	}
	for _, f := range changes.Fields(a, b) {
		field(f.Label, f.From, f.To)
	}
	field("values digest", a.Spec.ConfigurationDigest, b.Spec.ConfigurationDigest)
	field("artifact", a.Spec.Artifact.Digest, b.Spec.Artifact.Digest)

	if objects != nil && len(objects.changes) > 0 {
		w.printf("\nObjects:\n")
		for _, c := range objects.changes {
			w.printf("%s", c.Diff)
		}
	}
	return w.err
}

// sourceChange says how the source of b differs from a's: another chart, another version, or
// the same version resolved to another digest (a tag that moved).
func sourceChange(a, b *v1.Preparation) string {
	sa, sb := a.Spec.Source, b.Spec.Source
	switch {
	case sa.URL != sb.URL:
		return sourceRef(sa) + " → " + sourceRef(sb)
	case sa.Version != sb.Version:
		return orNone(sa.Version) + " → " + orNone(sb.Version) + " (" + sa.URL + ")"
	case sa.Digest != sb.Digest:
		return orNone(sa.Version) + " of " + sa.URL + ", which resolved to another digest (" + shortDigest(sa.Digest) + " → " + shortDigest(sb.Digest) + "): the tag moved"
	}
	return "unchanged (" + sourceRef(sa) + ")"
}

// sourceRef is a source as url:version.
func sourceRef(s v1.PreparationSource) string {
	if s.Version == "" {
		return s.URL
	}
	return s.URL + ":" + s.Version
}

// olderOf says which of a and b lacks the digest of its values: "web-1 was", "web-1 and web-2
// were".
func olderOf(a, b *v1.Preparation) string {
	switch {
	case a.Spec.ConfigurationDigest == "" && b.Spec.ConfigurationDigest == "":
		return a.Name + " and " + b.Name + " were"
	case a.Spec.ConfigurationDigest == "":
		return a.Name + " was"
	}
	return b.Name + " was"
}

// imageCounts counts the images by change.
func imageCounts(images []changes.ImageChange, unchanged int) string {
	counts := map[changes.Change]int{}
	for _, c := range images {
		counts[c.Change]++
	}
	switch {
	case len(images) == 0 && unchanged == 0:
		return "none"
	case len(images) == 0:
		return fmt.Sprintf("unchanged (%d)", unchanged)
	}
	return fmt.Sprintf("%d changed, %d added, %d removed, %d unchanged", counts[changes.Changed], counts[changes.Added], counts[changes.Removed], unchanged)
}

// objectCounts counts the objects by change.
func objectCounts(d *objectsDiff) string {
	counts := map[changes.Change]int{}
	for _, c := range d.changes {
		counts[c.Change]++
	}
	return fmt.Sprintf("%d changed, %d added, %d removed, %d unchanged", counts[changes.Changed], counts[changes.Added], counts[changes.Removed], d.unchanged)
}

// imageChange is one image that differs, old → new: "~ repo 6.1.0 → 6.2.0 (digest a → b)".
func imageChange(c changes.ImageChange) string {
	switch c.Change {
	case changes.Added:
		return fmt.Sprintf("+ %s (digest %s)", c.To.Original, shortDigest(changes.PinnedDigest(c.To.Pinned)))
	case changes.Removed:
		return fmt.Sprintf("- %s (digest %s)", c.From.Original, shortDigest(changes.PinnedDigest(c.From.Pinned)))
	}
	digests := shortDigest(changes.PinnedDigest(c.From.Pinned)) + " → " + shortDigest(changes.PinnedDigest(c.To.Pinned))
	from, to := imageTag(c.Repository, c.From.Original), imageTag(c.Repository, c.To.Original)
	if from == to {
		return fmt.Sprintf("~ %s %s, pinned to another digest (%s)", c.Repository, from, digests)
	}
	return fmt.Sprintf("~ %s %s → %s (digest %s)", c.Repository, from, to, digests)
}

// imageTag is the tag (or digest) an image reference names after its repository; latest when
// it names none.
func imageTag(repository, ref string) string {
	tag := strings.TrimLeft(strings.TrimPrefix(ref, repository), ":@")
	if tag == "" {
		return "latest"
	}
	return tag
}

// diffManifests pulls both artifacts and diffs them object by object, with the values of the
// Secrets the user of c may not get masked (changes.RedactSecrets) and a note of them on
// stderr.
func (o *options) diffManifests(ctx context.Context, c client.Client, moved bool, a, b *v1.Preparation) (*objectsDiff, error) {
	reg, err := o.artifactClient(ctx, c, moved, a, b)
	if err != nil {
		return nil, err
	}
	ma, err := reg.pull(ctx, a)
	if err != nil {
		return nil, err
	}
	mb, err := reg.pull(ctx, b)
	if err != nil {
		return nil, err
	}
	oa, err := changes.Objects(a.Name, ma)
	if err != nil {
		return nil, err
	}
	ob, err := changes.Objects(b.Name, mb)
	if err != nil {
		return nil, err
	}
	redacted, hidden, err := changes.RedactSecrets(func(namespace string) (bool, error) { return mayGetSecrets(ctx, c, namespace) },
		changes.Side{Objects: oa, Namespace: a.Spec.TargetNamespace}, changes.Side{Objects: ob, Namespace: b.Spec.TargetNamespace})
	if err != nil {
		return nil, err
	}
	objects, unchanged, err := changes.DiffObjects(a.Name, b.Name, redacted[0], redacted[1])
	if err != nil {
		return nil, err
	}
	if len(hidden) > 0 {
		n := &errWriter{w: o.streams.ErrOut}
		n.printf("Note: %s (%s)\n", changes.RedactedNote(hidden), strings.Join(hidden, ", "))
		if n.err != nil {
			return nil, n.err
		}
	}
	return &objectsDiff{changes: objects, unchanged: unchanged}, nil
}

// mayGetSecrets asks the API server whether the user of c may get secrets in namespace
// (kubectl auth can-i get secrets -n namespace).
func mayGetSecrets(ctx context.Context, c client.Client, namespace string) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets"},
	}}
	if err := c.Create(ctx, review); err != nil {
		return false, fmt.Errorf("ask whether you may get secrets in %s (kubectl auth can-i get secrets -n %s): %w", namespace, namespace, err)
	}
	return review.Status.Allowed && !review.Status.Denied, nil
}
