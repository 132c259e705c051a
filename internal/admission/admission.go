// Package admission is Kokumi's admission check of Argo CD Applications: a validating webhook
// that refuses an Application deploying a Preparation's artifact to an Environment whose
// stages require a verified deployment record (requires[].verified) unless such a record of
// each stage, signed by a key Kokumi's public keys list, is attached to an artifact of the
// same release (docs/deployment-records.md, "Install the admission check"). It holds no
// signing key: records are verified with the public keys only (internal/record), and the
// evidence is looked for as the stages package defines it (stages.Pipeline.MissingRecords).
//
// No stock policy engine can ask this of an Application as Kokumi writes it; the docs say why.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// Path is where the webhook serves the check of Applications.
const Path = "/validate-argoproj-io-v1alpha1-application"

// Check is the admission check of Applications.
type Check struct {
	// Client reads Orders and Preparations.
	Client client.Reader
	// Records finds the stages' records (its Keys are the public keys trusted).
	Records *stages.Pipeline
}

// source is what an Application deploys: one of spec.source and spec.sources.
type source struct {
	RepoURL        string `json:"repoURL"`
	TargetRevision string `json:"targetRevision"`
}

// application is the part of an Application the check reads.
type application struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Source  *source  `json:"source"`
		Sources []source `json:"sources"`
	} `json:"spec"`
}

// artifacts are the Preparations' artifacts an Application deploys: the sources whose
// repository is an Order's (kokumi/<namespace>/<order>, whatever the registry's host).
func (a *application) artifacts() []artifact {
	all := slices.Clone(a.Spec.Sources)
	if a.Spec.Source != nil {
		all = append(all, *a.Spec.Source)
	}
	var out []artifact
	for _, s := range all {
		_, path, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(s.RepoURL), "oci://"), "/")
		parts := strings.Split(path, "/")
		if len(parts) != 3 || parts[0] != preparation.ArtifactDir {
			continue
		}
		out = append(out, artifact{namespace: parts[1], order: parts[2], repoURL: s.RepoURL, revision: s.TargetRevision})
	}
	return out
}

// artifact is an Order's artifact an Application deploys, at a revision.
type artifact struct {
	namespace, order, repoURL, revision string
}

// Handle admits or refuses an Application's creation or update.
func (c *Check) Handle(ctx context.Context, req admission.Request) admission.Response {
	var app application
	if err := json.Unmarshal(req.Object.Raw, &app); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the Application: %w", err))
	}
	arts := app.artifacts()
	if req.Operation == admissionv1.Update {
		var old application
		if err := json.Unmarshal(req.OldObject.Raw, &old); err == nil && slices.Equal(old.artifacts(), arts) {
			// Argo CD and Kokumi update Applications all the time; what they deploy was admitted.
			return admission.Allowed("the Preparations it deploys did not change")
		}
	}
	for _, a := range arts {
		if problem := c.check(ctx, &app, a); problem != "" {
			return admission.Denied(problem)
		}
	}
	return admission.Allowed("")
}

// check returns why app may not deploy a, or "".
func (c *Check) check(ctx context.Context, app *application, a artifact) string {
	name := fmt.Sprintf("Application %s/%s", app.Metadata.Namespace, app.Metadata.Name)
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
	env := order.Spec.EnvironmentRef.Name
	missing, err := c.Records.MissingRecords(ctx, a.namespace, env, prep)
	if err != nil {
		return fmt.Sprintf("%s deploys Preparation %s/%s to Environment %s, whose stages' records cannot be checked (%v); Kokumi's admission check refuses what it cannot check",
			name, a.namespace, prep.Name, env, err)
	}
	if len(missing) == 0 {
		return ""
	}
	m := missing[0]
	stage := "Environment " + m.Environment
	if m.Wave != "" {
		stage = "wave " + m.Wave + " of Environment " + m.Environment
	}
	return fmt.Sprintf("%s deploys Preparation %s/%s to Environment %s, which requires a verified deployment record of %s, and there is none: %s. "+
		"Promote this release through %s first (Kokumi attaches the record once it is verified there), or change the Environment's spec.requires",
		name, a.namespace, prep.Name, env, stage, m.Problem, m.Environment)
}

// PublicKeys are public keys an admin gives the check (the flag --public-keys), instead of
// the ConfigMap kokumi-public-keys: a stages.TrustedKeySource.
type PublicKeys record.TrustedKeys

// Trusted returns the keys.
func (k PublicKeys) Trusted(context.Context) (record.TrustedKeys, error) {
	return record.TrustedKeys(k), nil
}
