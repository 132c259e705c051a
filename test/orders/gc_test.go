package orders

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opencontainers/go-digest"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/gc"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// artifactOf splits a Preparation's artifact into its repository (host/path) and digest.
func artifactOf(p *v1.Preparation) (repository, digest string) {
	repository, digest, _ = strings.Cut(oci.TrimScheme(p.Spec.Artifact.Ref), "@")
	return repository, digest
}

// preparationNames lists the names of an Order's Preparations, sorted.
func preparationNames(t *testing.T, ns, orderName string) []string {
	t.Helper()
	var out []string
	for _, p := range preparations(t, ns, orderName) {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func namesOf(preps []v1.Preparation) []string {
	out := make([]string, 0, len(preps))
	for _, p := range preps {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// Thirteen releases of one Product through two Orders, with the history at 10: the Order
// nothing deploys keeps its newest ten, and its three oldest go with their artifacts and
// deployment records; the Order whose Serving runs its oldest while a roll-out to its second
// waits keeps both. The registry's collection then reclaims the deleted artifacts' blobs.
func TestOldPreparationsAndTheirArtifactsAreCollected(t *testing.T) {
	ctx := context.Background()
	if cfg.PreparationHistory != 10 {
		t.Fatalf("the history is %d, want the default 10", cfg.PreparationHistory)
	}
	creds := registryCredentials(t)
	puller := bundledClient(t, creds.Puller)
	src := newSource(t)
	ns := newNamespace(t)
	prod := src.product(t, ns, "podinfo", "", src.values("release 1"))
	order(t, ns, "history", "podinfo", "", v1.PromotionManual)
	order(t, ns, "deployed", "podinfo", "", v1.PromotionManual)

	made := map[string][]v1.Preparation{}
	var firstLayer string // the layer of history's first Preparation
	for i := 1; i <= 13; i++ {
		if i > 1 {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
					return err
				}
				prod.Spec.Render.Helm.Values = jsonValues(t, src.values(fmt.Sprintf("release %d", i)))
				return env.Client.Update(ctx, prod)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"history", "deployed"} {
			var prev string
			if n := len(made[name]); n > 0 {
				prev = made[name][n-1].Name
			}
			var prep v1.Preparation
			eventually(t, fmt.Sprintf("release %d of order %s", i, name), func() (bool, string) {
				o := getOrder(t, ns, name)
				if o.Status.LatestPreparation == "" || o.Status.LatestPreparation == prev {
					return false, readyMessage(o)
				}
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Status.LatestPreparation}, &prep)
				return err == nil, fmt.Sprint(err)
			})
			made[name] = append(made[name], prep)
		}
		switch i {
		case 1:
			// history's first gets a deployment record and its layer is noted, to see both go.
			first := &made["history"][0]
			repository, artifact := artifactOf(first)
			key, err := record.GenerateKey()
			if err != nil {
				t.Fatal(err)
			}
			signer, err := record.ParseSigner(key)
			if err != nil {
				t.Fatal(err)
			}
			store := &record.Store{Client: bundledClient(t, creds.Pusher)}
			if _, err := store.Attach(ctx, repository, artifact, signer, record.Predicate{Order: "history", Namespace: ns, Environment: "edge",
				TargetNamespace: ns, Preparation: first.Name, Clusters: []string{"edge-1"}, Time: time.Now()}); err != nil {
				t.Fatal(err)
			}
			pulled, err := puller.Pull(ctx, repository, artifact)
			if err != nil || len(pulled.Layers) != 1 {
				t.Fatalf("pull %s: %v", first.Spec.Artifact.Ref, err)
			}
			firstLayer = digest.FromBytes(pulled.Layers[0].Data).String()
		case 2:
			// deployed's Serving runs its first Preparation, and is promoted to its second, which
			// waits (as for a stage of its pipeline): the Serving reconciler does not run here.
			runs, promoted := made["deployed"][0], made["deployed"][1]
			servingOf(t, ns, "deployed")
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var s v1.Serving
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "deployed"}, &s); err != nil {
					return err
				}
				s.Spec.PreparationName, s.Spec.PromotedBy = promoted.Name, env.AdminName
				if err := env.Client.Update(ctx, &s); err != nil {
					return err
				}
				s.Status.Revision = runs.Spec.Artifact.Digest
				return env.Client.Status().Update(ctx, &s)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	history, deployed := made["history"], made["deployed"]
	wantHistory := namesOf(history[3:])
	wantDeployed := namesOf(append([]v1.Preparation{deployed[0], deployed[1]}, deployed[3:]...))
	eventually(t, "the oldest Preparations collected", func() (bool, string) {
		h, d := preparationNames(t, ns, "history"), preparationNames(t, ns, "deployed")
		return slices.Equal(h, wantHistory) && slices.Equal(d, wantDeployed),
			fmt.Sprintf("history has %v, want %v; deployed has %v, want %v", h, wantHistory, d, wantDeployed)
	})

	// The collected ones' manifests, and history's first's deployment records, are gone; the
	// kept ones' are there. The object's deletion is the commit point; its artifact goes right
	// after it.
	for _, p := range []v1.Preparation{history[0], history[1], history[2], deployed[2]} {
		eventually(t, "the artifact of the collected Preparation "+p.Name+" is gone", func() (bool, string) {
			err := headAs(t, strings.TrimPrefix(p.Spec.Artifact.Ref, "oci://"), creds.Puller)
			return ocitest.Status(err) == http.StatusNotFound, fmt.Sprintf("%v, want 404", err)
		})
	}
	repository, artifact := artifactOf(&history[0])
	tag, err := record.AttestationTag(artifact)
	if err != nil {
		t.Fatal(err)
	}
	if err := headAs(t, repository+":"+tag, creds.Puller); ocitest.Status(err) != http.StatusNotFound {
		t.Errorf("the deployment records of the collected Preparation %s: %v, want 404", history[0].Name, err)
	}
	kept := append(append([]v1.Preparation{}, history[3:]...), deployed[0], deployed[1])
	kept = append(kept, deployed[3:]...)
	for _, p := range kept {
		if !inBundled(t, strings.TrimPrefix(p.Spec.Artifact.Ref, "oci://")) {
			t.Errorf("the artifact of the kept Preparation %s is gone", p.Name)
		}
	}
	eventually(t, "an event naming the collected Preparations", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == gc.ReasonPreparationsCollected && e.Regarding.Name == "history" && strings.Contains(e.Note, history[0].Name) {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(evs.Items), " events")
	})

	// The registry's collection reclaims the blobs only the deleted manifests referenced, and
	// every kept Preparation still pulls whole.
	if status := blobStatusAs(t, repository, firstLayer, creds.Puller); status != http.StatusOK {
		t.Fatalf("the layer of a deleted manifest before the collection: %d, want 200 (kept until collected)", status)
	}
	before := ocitest.BlobBytes(t, bundledDir)
	gc, err := bundled.CollectGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := ocitest.BlobBytes(t, bundledDir)
	t.Logf("blob storage %d → %d bytes; writes held %s", before, after, gc.Took)
	if after >= before {
		t.Errorf("the blob storage did not shrink: %d → %d bytes", before, after)
	}
	if status := blobStatusAs(t, repository, firstLayer, creds.Puller); status != http.StatusNotFound {
		t.Errorf("the layer of a collected Preparation after the registry's collection: %d, want 404", status)
	}
	for _, p := range kept {
		repository, artifact := artifactOf(&p)
		if _, err := puller.Pull(ctx, repository, artifact); err != nil {
			t.Errorf("the kept Preparation %s does not pull after the registry's collection: %v", p.Name, err)
		}
	}

	// The Order goes on: a fourteenth release is pushed, and history's oldest kept one goes.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
			return err
		}
		prod.Spec.Render.Helm.Values = jsonValues(t, src.values("release 14"))
		return env.Client.Update(ctx, prod)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "release 14 rendered and history's fourth collected", func() (bool, string) {
		o := getOrder(t, ns, "history")
		names := preparationNames(t, ns, "history")
		return !slices.Contains(wantHistory, o.Status.LatestPreparation) && len(names) == 10 && !slices.Contains(names, history[3].Name),
			fmt.Sprintf("latest %s (%s), Preparations %v", o.Status.LatestPreparation, readyMessage(o), names)
	})
}

// blobStatusAs is the status of a GET of repository's (host/path) blob as c.
func blobStatusAs(t *testing.T, repository, blob string, c oci.Credential) int {
	t.Helper()
	host, path, _ := strings.Cut(repository, "/")
	req, err := http.NewRequest(http.MethodGet, "http://"+host+"/v2/"+path+"/blobs/"+blob, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(c.Username, c.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
