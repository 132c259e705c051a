package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// The server learns its own name (for the admin token, whose writes are its own) with a
// SelfSubjectReview, which every authenticated user may create.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// AbortRequest is the body of POST /api/v1/namespaces/{ns}/servings/{name}/abort: Preparation,
// when set, must be the one the Serving rolls out now; empty names it.
type AbortRequest struct {
	Preparation string `json:"preparation"`
}

// RolloutAnswer answers pause, resume and abort: the Serving, the Preparation it rolls out,
// its spec.rollout as it now stands, and whether the request changed it.
type RolloutAnswer struct {
	Serving     string             `json:"serving"`
	Preparation string             `json:"preparation"`
	Rollout     *v1.RolloutControl `json:"rollout,omitempty"`
	Changed     bool               `json:"changed"`
}

// pauseRollout pauses the roll-out of the Serving's Preparation (spec.rollout.paused).
func (s *Server) pauseRollout(w http.ResponseWriter, r *http.Request) {
	if !readOptionalJSON(w, r, &struct{}{}) {
		return
	}
	s.askRollout(w, r, rollout.Pause, "")
}

// resumeRollout resumes a paused roll-out; one that is not paused stays as it is (200).
func (s *Server) resumeRollout(w http.ResponseWriter, r *http.Request) {
	if !readOptionalJSON(w, r, &struct{}{}) {
		return
	}
	s.askRollout(w, r, rollout.Resume, "")
}

// abortRollout aborts the roll-out of the Serving's Preparation (spec.rollout.abort).
func (s *Server) abortRollout(w http.ResponseWriter, r *http.Request) {
	var req AbortRequest
	if !readOptionalJSON(w, r, &req) {
		return
	}
	s.askRollout(w, r, rollout.Abort, req.Preparation)
}

// askRollout writes what rollout.Ask makes of act into the Serving's spec.rollout, as the
// person who asks (who must be allowed to patch the Serving before anything of it is read),
// naming them in by as the API server knows them, which the admission policy
// kokumi-serving-rollout checks. A refusal is 422 naming its field, or 409.
func (s *Server) askRollout(w http.ResponseWriter, r *http.Request, act rollout.Action, preparation string) {
	ctx := r.Context()
	write, ok := s.servingToWrite(w, r)
	if !ok {
		return
	}
	sv := write.serving
	control, changed, err := rollout.Ask(sv, act, preparation, write.by)
	if err != nil {
		writeRolloutError(w, err)
		return
	}
	if changed && !write.patch(ctx, w, fmt.Sprintf("%s the roll-out of Serving %s", act, write.key), func(sv *v1.Serving) { sv.Spec.Rollout = control }) {
		return
	}
	writeJSON(w, http.StatusOK, RolloutAnswer{Serving: sv.Name, Preparation: sv.Spec.PreparationName, Rollout: sv.Spec.Rollout, Changed: changed})
}

// servingWrite is a write of the Serving of a request, as the person who asks: their client,
// their name as the API server knows them, and the Serving as read before the write.
type servingWrite struct {
	key     client.ObjectKey
	as      client.Client
	by      string
	serving *v1.Serving
}

// servingToWrite answers who writes the Serving of the request's path, once RBAC says they may
// patch it and do each of also (before anything of it is read): their client, their name
// (writerName), and the Serving read uncached as them (the admin's writer is the server: its
// API reader), so that what they ask names what it holds now and the patch holds to that very
// version; ok is false when the answer was written already.
func (s *Server) servingToWrite(w http.ResponseWriter, r *http.Request, also ...access) (write servingWrite, ok bool) {
	ctx := r.Context()
	key, as, ok := s.servingWriter(w, r)
	if !ok {
		return write, false
	}
	for _, a := range also {
		a.namespace, a.name = key.Namespace, key.Name
		if !s.authorize(w, r, a) {
			return write, false
		}
	}
	by, err := s.writerName(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return write, false
	}
	var read client.Reader = as
	if identityOf(ctx).Admin {
		read = s.reader
	}
	var sv v1.Serving
	if err := read.Get(ctx, key, &sv); err != nil {
		writeAPIError(w, "get Serving "+key.String(), err)
		return write, false
	}
	return servingWrite{key: key, as: as, by: by, serving: &sv}, true
}

// patch changes the Serving as the person, at the version read (a merge patch with its
// resourceVersion), and answers the failure (what names the write: 409 when the Serving changed
// in between, the API server's own refusal otherwise); ok is false when it did.
func (wr servingWrite) patch(ctx context.Context, w http.ResponseWriter, what string, change func(*v1.Serving)) (ok bool) {
	patch := client.MergeFromWithOptions(wr.serving.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(wr.serving)
	if err := wr.as.Patch(ctx, wr.serving, patch); err != nil {
		if apierrors.IsConflict(err) {
			writeError(w, http.StatusConflict, fmt.Sprintf("Serving %s changed while it was being patched: look at it again and retry", wr.key))
			return false
		}
		writeAPIError(w, what, err)
		return false
	}
	return true
}

// writeRolloutError answers a rollout.Refusal as 422 naming its field, or 409 without one;
// any other error as 500.
func writeRolloutError(w http.ResponseWriter, err error) {
	var refusal *rollout.Refusal
	switch {
	case errors.As(err, &refusal) && refusal.Field != "":
		writeFieldError(w, FieldError{refusal.Field, refusal.Message})
	case errors.As(err, &refusal):
		writeError(w, http.StatusConflict, refusal.Message)
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// writerName is the name the API server gives the writes of clientFor(ctx): the person's own,
// as the TokenReview of their token returned it (clientFor writes with that token), or, for
// the admin token, the server's own, as a SelfSubjectReview says.
func (s *Server) writerName(ctx context.Context) (string, error) {
	id := identityOf(ctx)
	if !id.Admin {
		return id.User.Username, nil
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := s.client.Create(ctx, review); err != nil {
		return "", fmt.Errorf("ask the API server the server's own name (SelfSubjectReview): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server did not name the server's own user (SelfSubjectReview)")
	}
	return review.Status.UserInfo.Username, nil
}

// readOptionalJSON reads r's JSON body into v, as readJSON does, accepting an empty body.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "read the request body as JSON: "+err.Error())
		return false
	}
	return true
}
