// Package admission is Kokumi's admission check of Argo CD Applications: a validating webhook
// that judges an Application by where it deploys. When its destination is a Kokumi Cluster that
// an Environment selects whose stages require a verified deployment record
// (requires[].verified), every source must be a Preparation's artifact for which such a record
// of each stage, signed by a key Kokumi's public keys list, is attached to an artifact of the
// same release, or a repository the admin exempts; an Application to any other destination is
// admitted (docs/deployment-records.md, "Install the admission check"). It holds no signing
// key: records are verified with the public keys only (internal/record), the evidence is looked
// for as the stages package defines it (stages.Pipeline.MissingRecords), and an Environment's
// members are the ones internal/cluster decides.
//
// No stock policy engine can ask this of an Application as Kokumi writes it; the docs say why.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// Path is where the webhook serves the check of Applications.
const Path = "/validate-argoproj-io-v1alpha1-application"

// Check is the admission check of Applications.
type Check struct {
	// Client reads Clusters, Environments, Orders and Preparations.
	Client client.Reader
	// Records finds the stages' records (its Keys are the public keys trusted).
	Records *stages.Pipeline
	// Exempt are repository prefixes (--exempt-repositories) whose sources may deploy to a
	// Cluster of a gated Environment without being a Preparation's artifact: the admins' own
	// add-ons. A prefix matches a repository URL equal to it or continuing it after a "/".
	Exempt []string
}

// source is what an Application deploys: one of spec.source, spec.sources, the dry source of
// spec.sourceHydrator and the sources an operation (a sync, a rollback) overrides them with.
type source struct {
	RepoURL        string `json:"repoURL"`
	TargetRevision string `json:"targetRevision"`
	// raw is the source as written, compacted; keys its fields, sorted and comma-separated.
	raw, keys string
}

// UnmarshalJSON reads the fields the check judges and keeps the whole source.
func (s *source) UnmarshalJSON(data []byte) error {
	var fields struct {
		RepoURL        string `json:"repoURL"`
		TargetRevision string `json:"targetRevision"`
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("decode a source: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return fmt.Errorf("decode a source: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return fmt.Errorf("decode a source: %w", err)
	}
	keys := slices.Sorted(maps.Keys(all))
	*s = source{RepoURL: fields.RepoURL, TargetRevision: fields.TargetRevision, raw: compact.String(), keys: strings.Join(keys, ",")}
	return nil
}

// asKokumiWrites reports whether s deploys an artifact as Kokumi's Applications do: its
// manifests as they are, with no tool (Helm, Kustomize, a plugin, a directory's options) that
// changes them and at the path ".".
func (s source) asKokumiWrites() bool {
	var fields map[string]any
	if err := json.Unmarshal([]byte(s.raw), &fields); err != nil {
		return false
	}
	for k, v := range fields {
		switch k {
		case "repoURL", "targetRevision", "name":
		case "path":
			if v != "." && v != "" {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// destination is where an Application deploys: a cluster by its server URL or by the name an
// Argo CD cluster Secret declares.
type destination struct {
	Server string `json:"server"`
	Name   string `json:"name"`
}

// application is the part of an Application the check reads.
type application struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Project        string      `json:"project"`
		Destination    destination `json:"destination"`
		Source         *source     `json:"source"`
		Sources        []source    `json:"sources"`
		SourceHydrator *struct {
			DrySource source `json:"drySource"`
		} `json:"sourceHydrator"`
	} `json:"spec"`
	Operation *struct {
		Sync *struct {
			Revision  string   `json:"revision"`
			Revisions []string `json:"revisions"`
			Source    *source  `json:"source"`
			Sources   []source `json:"sources"`
		} `json:"sync"`
	} `json:"operation"`
}

// sources are all the sources the Application names, whichever Argo CD uses: the spec's, and
// an operation's (a sync to another revision is the source at that revision; a rollback's
// sources are sources too).
func (a *application) sources() []source {
	all := slices.Clone(a.Spec.Sources)
	if a.Spec.Source != nil {
		all = append(all, *a.Spec.Source)
	}
	if a.Spec.SourceHydrator != nil {
		all = append(all, a.Spec.SourceHydrator.DrySource)
	}
	if a.Operation == nil || a.Operation.Sync == nil {
		return all
	}
	op := a.Operation.Sync
	at := func(s source, revision string) {
		// Argo CD may write the digest it resolved without its "sha256:" prefix.
		if revision != "" && revision != s.TargetRevision && !argocd.SameRevision(revision, s.TargetRevision) {
			s.TargetRevision = revision
			all = append(all, s)
		}
	}
	if a.Spec.Source != nil {
		at(*a.Spec.Source, op.Revision)
	}
	for i, s := range a.Spec.Sources {
		if i < len(op.Revisions) {
			at(s, op.Revisions[i])
		}
	}
	all = append(all, op.Sources...)
	if op.Source != nil {
		all = append(all, *op.Source)
	}
	return all
}

// artifactOf returns the Order's artifact s deploys, when its repository is an Order's
// (kokumi/<namespace>/<order>, whatever the registry's host).
func artifactOf(s source) (artifact, bool) {
	_, path, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(s.RepoURL), "oci://"), "/")
	parts := strings.Split(path, "/")
	if len(parts) != 3 || parts[0] != preparation.ArtifactDir {
		return artifact{}, false
	}
	return artifact{namespace: parts[1], order: parts[2], repoURL: s.RepoURL, revision: s.TargetRevision}, true
}

// artifact is an Order's artifact an Application deploys, at a revision.
type artifact struct {
	namespace, order, repoURL, revision string
}

// gate is an Environment that selects a Cluster the Application deploys to and requires
// verified records.
type gate struct {
	cluster string
	env     *v1.Environment
}

func (g gate) String() string {
	return fmt.Sprintf("Cluster %s, a member of Environment %s/%s,", g.cluster, g.env.Namespace, g.env.Name)
}

// Handle admits or refuses an Application's creation or update.
func (c *Check) Handle(ctx context.Context, req admission.Request) admission.Response {
	var app application
	if err := json.Unmarshal(req.Object.Raw, &app); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the Application: %w", err))
	}
	if req.Operation == admissionv1.Update {
		var old application
		if err := json.Unmarshal(req.OldObject.Raw, &old); err == nil && subset(app.sources(), old.sources()) &&
			old.Spec.Destination == app.Spec.Destination && old.Spec.Project == app.Spec.Project {
			// Argo CD and Kokumi update Applications all the time; what they deploy, and where,
			// was admitted (an operation that ends drops sources, and adds none).
			return admission.Allowed("what it deploys and where did not change")
		}
	}
	name := fmt.Sprintf("Application %s/%s", app.Metadata.Namespace, app.Metadata.Name)
	gates, err := c.gates(ctx, &app)
	if err != nil {
		return admission.Denied(fmt.Sprintf("%s: %v; Kokumi's admission check refuses what it cannot check", name, err))
	}
	if len(gates) == 0 {
		return admission.Allowed("its destination is no Cluster of an Environment that requires verified records")
	}
	all := app.sources()
	if len(all) == 0 {
		return admission.Denied(fmt.Sprintf("%s deploys to %s which requires verified deployment records, and names no source the check can read",
			name, gates[0]))
	}
	for _, s := range all {
		a, ok := artifactOf(s)
		if !ok {
			if !c.exempt(s.RepoURL) {
				return admission.Denied(fmt.Sprintf("%s deploys %s to %s which requires verified deployment records: only a Preparation's artifact, "+
					"deployed through its Serving, goes there, or a repository an admin exempts (kokumi admission --exempt-repositories)",
					name, s.RepoURL, gates[0]))
			}
			continue
		}
		if !s.asKokumiWrites() {
			return admission.Denied(fmt.Sprintf("%s deploys %s with the source fields %s to %s which requires verified deployment records: "+
				"a Preparation's artifact goes there as Kokumi writes it (repoURL, targetRevision, path \".\"), with nothing that changes its manifests",
				name, s.RepoURL, s.keys, gates[0]))
		}
		if problem := c.check(ctx, name, a, gates); problem != "" {
			return admission.Denied(problem)
		}
	}
	return admission.Allowed("")
}

// subset reports whether every source of some is one of all.
func subset(some, all []source) bool {
	for _, s := range some {
		if !slices.Contains(all, s) {
			return false
		}
	}
	return true
}

// exempt reports whether repoURL is under a prefix of c.Exempt.
func (c *Check) exempt(repoURL string) bool {
	repoURL = strings.TrimSpace(repoURL)
	for _, p := range c.Exempt {
		if p != "" && strings.HasPrefix(repoURL, p) &&
			(len(repoURL) == len(p) || strings.HasSuffix(p, "/") || repoURL[len(p)] == '/') {
			return true
		}
	}
	return false
}

// sameServer reports whether two cluster server URLs name the same server as Argo CD matches
// them; it errs towards the same (a match is checked, never waved through).
func sameServer(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.TrimRight(strings.TrimSpace(s), "/")) }
	return a != "" && norm(a) == norm(b)
}

// gates returns the Environments, of every namespace, that select a Kokumi Cluster app's
// destination names (its server is the Cluster's spec.server, as Kokumi's Argo CD cluster
// Secret declares it, or its name is the Cluster's, as that Secret names it) and require
// verified records of a stage.
func (c *Check) gates(ctx context.Context, app *application) ([]gate, error) {
	dest := app.Spec.Destination
	var clusters v1.ClusterList
	if err := c.Client.List(ctx, &clusters); err != nil {
		return nil, fmt.Errorf("cannot list the Clusters (%w)", err)
	}
	var targets []v1.Cluster
	for _, cl := range clusters.Items {
		if sameServer(dest.Server, cl.Spec.Server) || (dest.Name != "" && dest.Name == cl.Name) ||
			(dest.Name == argocd.InClusterName && sameServer(v1.InClusterServer, cl.Spec.Server)) {
			// A Cluster being deleted has left its Environments, but its Argo CD cluster
			// Secret stays until its Applications are gone: judge it as a member still.
			cl.DeletionTimestamp = nil
			targets = append(targets, cl)
		}
	}
	if len(targets) == 0 {
		return nil, nil
	}
	var envs v1.EnvironmentList
	if err := c.Client.List(ctx, &envs); err != nil {
		return nil, fmt.Errorf("cannot list the Environments (%w)", err)
	}
	var out []gate
	for i := range envs.Items {
		env := &envs.Items[i]
		sel, err := cluster.Selector(&env.Spec.ClusterSelector)
		if err != nil {
			continue // it selects no Cluster, for Kokumi either
		}
		members := cluster.Members(sel, targets)
		if len(members) == 0 {
			continue
		}
		required, err := c.Records.RequiresRecords(ctx, env.Namespace, env.Name)
		if err != nil {
			return nil, fmt.Errorf("cannot read the requirements of Environment %s/%s (%w)", env.Namespace, env.Name, err)
		}
		if required {
			for _, m := range members {
				out = append(out, gate{cluster: m.Name, env: env})
			}
		}
	}
	return out, nil
}

// check returns why the Application name may not deploy a to the gates' Clusters, or "".
func (c *Check) check(ctx context.Context, name string, a artifact, gates []gate) string {
	var order v1.Order
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: a.order}, &order); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("%s deploys %s, the artifacts of Order %s/%s, which does not exist: deploy a Preparation of an Order through its Serving",
				name, a.repoURL, a.namespace, a.order)
		}
		return fmt.Sprintf("%s: cannot read Order %s/%s (%v); Kokumi's admission check refuses what it cannot check", name, a.namespace, a.order, err)
	}
	var preps v1.PreparationList
	if err := c.Client.List(ctx, &preps, client.InNamespace(a.namespace)); err != nil {
		return fmt.Sprintf("%s: cannot list the Preparations of namespace %s (%v); Kokumi's admission check refuses what it cannot check", name, a.namespace, err)
	}
	var prep *v1.Preparation
	for i := range preps.Items {
		if p := &preps.Items[i]; p.Spec.OrderRef.Name == a.order && p.Spec.Artifact.Digest == a.revision {
			prep = p
		}
	}
	if prep == nil {
		return fmt.Sprintf("%s deploys %s at %q, which is no Preparation of Order %s/%s: deploy a Preparation, at its digest, through its Serving",
			name, a.repoURL, a.revision, a.namespace, a.order)
	}
	for _, g := range gates {
		missing, err := c.Records.MissingRecords(ctx, g.env.Namespace, g.env.Name, prep)
		if err != nil {
			return fmt.Sprintf("%s deploys Preparation %s/%s to %s whose stages' records cannot be checked (%v); Kokumi's admission check refuses what it cannot check",
				name, a.namespace, prep.Name, g, err)
		}
		if len(missing) == 0 {
			continue
		}
		m := missing[0]
		stage := "Environment " + m.Environment
		if m.Wave != "" {
			stage = "wave " + m.Wave + " of Environment " + m.Environment
		}
		return fmt.Sprintf("%s deploys Preparation %s/%s to %s which requires a verified deployment record of %s, and there is none: %s. "+
			"Promote this release through %s first (Kokumi attaches the record once it is verified there), or change the Environment's spec.requires",
			name, a.namespace, prep.Name, g, stage, m.Problem, m.Environment)
	}
	return ""
}

// PublicKeys are public keys an admin gives the check (the flag --public-keys), instead of
// the ConfigMap kokumi-public-keys: a stages.TrustedKeySource.
type PublicKeys record.TrustedKeys

// Trusted returns the keys.
func (k PublicKeys) Trusted(context.Context) (record.TrustedKeys, error) {
	return record.TrustedKeys(k), nil
}
