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
PREP_A. Without flags it compares what the Preparations record: the source (URL,
version, resolved digest), the target namespace, the config hash and every image with
the digest it was pinned to (added, removed, changed; an image is matched by its
repository, so a new tag of the same image shows as changed).

With --manifests it also pulls both artifacts from the registry their spec.artifact.ref
names (by digest), signed in with your docker config's credentials (docker login, or a
credential helper), and prints a unified diff of the rendered manifests, object by
object. Use --registry-insecure for a registry that speaks plain HTTP. The values of a
rendered Secret are masked (++++++++, its keys kept; a value that changed gets a longer
mask) unless you may get secrets in its namespace (the target namespace when it names
none), as Kokumi's UI masks them; a note on stderr names the Secrets masked.`,
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
			return o.printManifestsDiff(ctx, c, a, b)
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
	for _, f := range changes.Fields(a, b) {
		field(f.Label, f.From, f.To)
	}
	field("artifact", a.Spec.Artifact.Digest, b.Spec.Artifact.Digest)

	images, unchanged := changes.Images(a.Spec.Images, b.Spec.Images)
	counts := map[changes.Change]int{}
	for _, c := range images {
		counts[c.Change]++
	}
	w.printf("Images: %d changed, %d added, %d removed, %d unchanged\n", counts[changes.Changed], counts[changes.Added], counts[changes.Removed], unchanged)
	for _, c := range images {
		switch c.Change {
		case changes.Changed:
			w.printf("  ~ %s\n      - %s → %s\n      + %s → %s\n", c.Repository, c.From.Original, changes.PinnedDigest(c.From.Pinned), c.To.Original, changes.PinnedDigest(c.To.Pinned))
		case changes.Added:
			w.printf("  + %s → %s\n", c.To.Original, changes.PinnedDigest(c.To.Pinned))
		case changes.Removed:
			w.printf("  - %s → %s\n", c.From.Original, changes.PinnedDigest(c.From.Pinned))
		}
	}
	return w.err
}

// printManifestsDiff pulls both artifacts and prints a unified diff of each object that
// differs, with the values of the Secrets the user of c may not get masked
// (changes.RedactSecrets) and a note of them on stderr.
func (o *options) printManifestsDiff(ctx context.Context, c client.Client, a, b *v1.Preparation) error {
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
	oa, err := changes.Objects(a.Name, ma)
	if err != nil {
		return err
	}
	ob, err := changes.Objects(b.Name, mb)
	if err != nil {
		return err
	}
	redacted, hidden, err := changes.RedactSecrets(func(namespace string) (bool, error) { return mayGetSecrets(ctx, c, namespace) },
		changes.Side{Objects: oa, Namespace: a.Spec.TargetNamespace}, changes.Side{Objects: ob, Namespace: b.Spec.TargetNamespace})
	if err != nil {
		return err
	}
	objects, unchanged, err := changes.DiffObjects(a.Name, b.Name, redacted[0], redacted[1])
	if err != nil {
		return err
	}
	counts := map[changes.Change]int{}
	var body strings.Builder
	for _, c := range objects {
		counts[c.Change]++
		body.WriteString(c.Diff)
	}
	if len(hidden) > 0 {
		n := &errWriter{w: o.streams.ErrOut}
		n.printf("Note: %s (%s)\n", changes.RedactedNote(hidden), strings.Join(hidden, ", "))
		if n.err != nil {
			return n.err
		}
	}
	w := &errWriter{w: o.streams.Out}
	w.printf("Manifests (objects): %d changed, %d added, %d removed, %d unchanged\n", counts[changes.Changed], counts[changes.Added], counts[changes.Removed], unchanged)
	w.printf("%s", body.String())
	return w.err
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
