package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/changes"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// The UI shows what a Preparation renders and what changes from one Preparation to another, as
// `kubectl kokumi diff --manifests` prints it (internal/changes): the server pulls the
// artifacts as the bundled registry's puller, for a person who may get the Preparations. The
// values of the Secrets among the objects are masked unless the person may get Secrets where
// each goes (redactSecrets); the answer names the Secrets masked.

const (
	// MaxObjects caps the objects a Preparation's manifests, or a diff, lists.
	MaxObjects = 200
	// MaxObjectText caps the YAML of one object, or the diff of one object, in bytes; past it
	// the text is cut at a line and ends with a note.
	MaxObjectText = 64 << 10
	// maxArtifactBytes bounds what is read of one artifact, compressed and uncompressed.
	maxArtifactBytes = 16 << 20
	// artifactTimeout bounds how long a request waits for the registry to hand an artifact.
	artifactTimeout = 20 * time.Second
)

// PreparationManifests is what a Preparation renders: its pinned images and its objects.
type PreparationManifests struct {
	Preparation string `json:"preparation"`
	// Digest is the artifact's digest (spec.artifact.digest).
	Digest string        `json:"digest"`
	Images []v1.ImagePin `json:"images"`
	// Objects are the rendered objects in the order of the manifests, at most MaxObjects;
	// ObjectsOmitted counts the rest.
	Objects        []ManifestObject `json:"objects"`
	ObjectsOmitted int              `json:"objectsOmitted"`
	Redaction
}

// Redaction names the rendered Secrets whose values an answer masks (changes.RedactSecrets):
// those of the namespaces where the person may not get Secrets.
type Redaction struct {
	// Redacted are the Secrets masked, as Secret/<namespace>/<name>, sorted; empty for none.
	Redacted []string `json:"redacted"`
	// RedactedNote says it in a sentence, such as "values of 2 Secrets hidden: you may not
	// get secrets in namespace shop"; empty for none.
	RedactedNote string `json:"redactedNote,omitempty"`
}

// ManifestObject is one rendered object.
type ManifestObject struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// YAML is the object, at most MaxObjectText bytes.
	YAML string `json:"yaml"`
}

// PreparationDiff is what changes if To is promoted over From.
type PreparationDiff struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Fields are the recorded fields that differ (changes.Fields).
	Fields []FieldChange `json:"fields"`
	// Images are the images that differ, by repository.
	Images []ImageDiff `json:"images"`
	// Objects are the rendered objects that differ, by apiVersion, kind, namespace and name,
	// at most MaxObjects; ObjectsOmitted counts the rest.
	Objects        []ObjectDiff `json:"objects"`
	ObjectsOmitted int          `json:"objectsOmitted"`
	Redaction
}

// FieldChange is one recorded field that differs: source.url, source.version, source.digest,
// targetNamespace or configHash.
type FieldChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// ImageDiff is one image that differs: its repository, and the image of each side as
// <original>@<digest> (empty on the side that lacks it).
type ImageDiff struct {
	Image string `json:"image"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Change is added, removed or changed.
	Change string `json:"change"`
}

// ObjectDiff is one rendered object that differs.
type ObjectDiff struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Change is added, removed or changed.
	Change string `json:"change"`
	// Diff is a unified diff of its YAML, at most MaxObjectText bytes.
	Diff string `json:"diff"`
}

// preparationManifests answers what a Preparation renders to a person who may get it.
func (s *Server) preparationManifests(w http.ResponseWriter, r *http.Request) {
	prep, ok := s.readablePreparation(w, r, r.PathValue("name"))
	if !ok {
		return
	}
	objs, err := s.objectsOf(r.Context(), prep)
	if err != nil {
		writeError(w, http.StatusBadGateway, text.Truncate(err.Error(), maxProblem))
		return
	}
	redacted, redaction, err := s.redactSecrets(r.Context(), changes.Side{Objects: objs, Namespace: prep.Spec.TargetNamespace})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	objs = redacted[0]
	out := PreparationManifests{Preparation: prep.Name, Digest: prep.Spec.Artifact.Digest, Images: prep.Spec.Images, Objects: []ManifestObject{}, Redaction: redaction}
	if out.Images == nil {
		out.Images = []v1.ImagePin{}
	}
	for _, o := range objs {
		if len(out.Objects) == MaxObjects {
			out.ObjectsOmitted++
			continue
		}
		out.Objects = append(out.Objects, ManifestObject{
			Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
			YAML: text.TruncateLines(o.YAML, MaxObjectText, "the object's YAML"),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// preparationDiff answers what changes if the Preparation is promoted over ?against=, another
// Preparation of its Order, to a person who may get both.
func (s *Server) preparationDiff(w http.ResponseWriter, r *http.Request) {
	to, ok := s.readablePreparation(w, r, r.PathValue("name"))
	if !ok {
		return
	}
	name := r.URL.Query().Get("against")
	if name == "" {
		writeFieldError(w, FieldError{"against", "name the Preparation of Order " + to.Spec.OrderRef.Name + " to compare " + to.Name + " with"})
		return
	}
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "preparations", namespace: to.Namespace, name: name}) {
		return
	}
	var from v1.Preparation
	if err := s.client.Get(r.Context(), client.ObjectKey{Namespace: to.Namespace, Name: name}, &from); err != nil {
		if client.IgnoreNotFound(err) == nil {
			writeFieldError(w, FieldError{"against", fmt.Sprintf("no Preparation %q in %s", name, to.Namespace)})
			return
		}
		writeAPIError(w, "get Preparation "+name, err)
		return
	}
	if from.Spec.OrderRef.Name != to.Spec.OrderRef.Name {
		writeFieldError(w, FieldError{"against", fmt.Sprintf("%s belongs to Order %s, not %s: compare Preparations of the same Order", from.Name, from.Spec.OrderRef.Name, to.Spec.OrderRef.Name)})
		return
	}
	out := PreparationDiff{From: from.Name, To: to.Name, Fields: []FieldChange{}, Images: []ImageDiff{}, Objects: []ObjectDiff{}}
	for _, f := range changes.Fields(&from, to) {
		if f.From != f.To {
			out.Fields = append(out.Fields, FieldChange{Field: f.Name, From: f.From, To: f.To})
		}
	}
	images, _ := changes.Images(from.Spec.Images, to.Spec.Images)
	for _, c := range images {
		out.Images = append(out.Images, ImageDiff{Image: c.Repository, From: imageRef(c.From), To: imageRef(c.To), Change: string(c.Change)})
	}
	oa, err := s.objectsOf(r.Context(), &from)
	if err != nil {
		writeError(w, http.StatusBadGateway, text.Truncate(err.Error(), maxProblem))
		return
	}
	ob, err := s.objectsOf(r.Context(), to)
	if err != nil {
		writeError(w, http.StatusBadGateway, text.Truncate(err.Error(), maxProblem))
		return
	}
	redacted, redaction, err := s.redactSecrets(r.Context(),
		changes.Side{Objects: oa, Namespace: from.Spec.TargetNamespace}, changes.Side{Objects: ob, Namespace: to.Spec.TargetNamespace})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out.Redaction = redaction
	objects, _, err := changes.DiffObjects(from.Name, to.Name, redacted[0], redacted[1])
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, c := range objects {
		if len(out.Objects) == MaxObjects {
			out.ObjectsOmitted++
			continue
		}
		out.Objects = append(out.Objects, ObjectDiff{
			Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, Change: string(c.Change),
			Diff: text.TruncateLines(c.Diff, MaxObjectText, "the diff"),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// readablePreparation gets the Preparation name of the request's namespace for a person who
// may get it; otherwise it answers 403 (asked before anything is read: no oracle), or 404.
func (s *Server) readablePreparation(w http.ResponseWriter, r *http.Request, name string) (*v1.Preparation, bool) {
	ns := r.PathValue("ns")
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "preparations", namespace: ns, name: name}) {
		return nil, false
	}
	var prep v1.Preparation
	if err := s.client.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &prep); err != nil {
		writeAPIError(w, "get Preparation "+ns+"/"+name, err)
		return nil, false
	}
	return &prep, true
}

// objectsOf pulls the artifact of prep, where it is now (preparation.ArtifactLocation), as the
// bundled registry's puller, and returns its rendered objects.
func (s *Server) objectsOf(ctx context.Context, prep *v1.Preparation) ([]changes.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, artifactTimeout)
	defer cancel()
	repository, digest := preparation.ArtifactLocation(s.opts.BundledRegistry, prep)
	m, err := changes.PullManifests(ctx, s.puller, prep.Name, repository, digest, maxArtifactBytes)
	if err != nil {
		return nil, fmt.Errorf("read the manifests from the registry: %w", err)
	}
	return changes.Objects(prep.Name, m)
}

// redactSecrets masks the values of the Secrets among sides, the objects of Preparations,
// that the request's person may not get (asked of RBAC, in each Secret's namespace), and says
// which: the one place the manifests and the diff answered to a person are redacted.
func (s *Server) redactSecrets(ctx context.Context, sides ...changes.Side) ([][]changes.Object, Redaction, error) {
	out, redacted, err := changes.RedactSecrets(func(namespace string) (bool, error) {
		return s.may(ctx, access{verb: "get", resource: "secrets", namespace: namespace})
	}, sides...)
	if err != nil {
		return nil, Redaction{}, err
	}
	return out, Redaction{Redacted: redacted, RedactedNote: changes.RedactedNote(redacted)}, nil
}

// imageRef is an image as <original>@<digest>, or the original when it names its digest; empty
// for the zero ImagePin.
func imageRef(p v1.ImagePin) string {
	if p.Original == "" || strings.Contains(p.Original, "@") || p.Pinned == "" {
		return p.Original
	}
	return p.Original + "@" + changes.PinnedDigest(p.Pinned)
}
