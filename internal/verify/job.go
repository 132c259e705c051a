package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Labels of a verification's Job.
const (
	LabelServing          = "delivery.kokumi.dev/serving"
	LabelServingNamespace = "delivery.kokumi.dev/serving-namespace"
	LabelServingUID       = "delivery.kokumi.dev/serving-uid"
	LabelVerification     = "delivery.kokumi.dev/verification"
)

// JobRunner runs job verifications as Jobs in Namespace, Kokumi's own: a namespace the tenants
// whose roll-outs the Jobs judge can neither write nor read, so that no tenant makes, replaces
// or steers the Job (or a Pod the Job controller would adopt) whose outcome gates its release.
// It reads Jobs and their Pods straight from the API server (no cache of every Job and Pod of
// the hub), and believes only the Job it created: the UID it recorded, with the spec it built.
type JobRunner struct {
	// Client creates the Jobs.
	Client client.Client
	// Reader reads them and their Pods.
	Reader client.Reader
	// Namespace is where the Jobs run: Kokumi's namespace.
	Namespace string
}

// JobName is the name of the Job of run n of a verification of a Serving's Preparation, at
// most 63 characters, stable across reconciles.
func JobName(facts Facts, wave, name string, run int32) string {
	uid := ""
	if facts.Serving != nil {
		uid = string(facts.Serving.UID)
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{uid, facts.Preparation, wave, name}, "/")))
	prefix := name
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-")
	}
	return fmt.Sprintf("%s-%s-%d", prefix, hex.EncodeToString(sum[:])[:8], run)
}

// Start creates the Job of run n and returns its UID, to be recorded with the run (Read
// believes that Job alone). A Job of that name that exists already is taken only when it is the
// one Kokumi builds for this run (a reconcile whose status write was lost made it: nobody else
// writes Kokumi's namespace); any other fails the run, and refused says why.
func (j *JobRunner) Start(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts) (uid types.UID, refused string, err error) {
	job := j.jobFor(spec, wave, run, facts)
	err = j.Client.Create(ctx, job)
	switch {
	case err == nil:
		return job.UID, "", nil
	case !apierrors.IsAlreadyExists(err):
		return "", "", fmt.Errorf("create Job %s/%s of verification %s: %w", job.Namespace, job.Name, spec.Name, err)
	}
	var existing batchv1.Job
	if err := j.Reader.Get(ctx, client.ObjectKeyFromObject(job), &existing); err != nil {
		return "", "", fmt.Errorf("read Job %s/%s of verification %s: %w", job.Namespace, job.Name, spec.Name, err)
	}
	if why := differs(job, &existing); why != "" {
		return "", fmt.Sprintf("Job %s/%s existed before Kokumi created it, and %s: the run fails", job.Namespace, job.Name, why), nil
	}
	return existing.UID, "", nil
}

// Read reads the Job of run n, which Start created with the UID uid: whether it finished, and
// what it said. A Job that is gone, that has another UID (deleted and made again) or whose spec
// is not what Kokumi built ends the run as failed, and the message says what changed.
func (j *JobRunner) Read(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts, uid types.UID) (Outcome, bool, error) {
	name := JobName(facts, wave, spec.Name, run)
	var job batchv1.Job
	if err := j.Reader.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: name}, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return Outcome{Message: fmt.Sprintf("Job %s/%s is gone before it finished: the run fails", j.Namespace, name)}, true, nil
		}
		return Outcome{}, false, fmt.Errorf("read Job %s/%s of verification %s: %w", j.Namespace, name, spec.Name, err)
	}
	if job.UID != uid {
		return Outcome{Message: fmt.Sprintf("Job %s/%s was replaced: Kokumi created it with UID %s, and a Job of UID %s stands in its place; the run fails",
			j.Namespace, name, uid, job.UID)}, true, nil
	}
	if why := differs(j.jobFor(spec, wave, run, facts), &job); why != "" {
		return Outcome{Message: fmt.Sprintf("Job %s/%s changed after Kokumi created it: %s; the run fails", j.Namespace, name, why)}, true, nil
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue || (c.Type != batchv1.JobComplete && c.Type != batchv1.JobFailed) {
			continue
		}
		said, err := j.output(ctx, &job)
		if err != nil {
			return Outcome{}, false, err
		}
		if c.Type == batchv1.JobComplete {
			return Outcome{Passed: true, Message: fmt.Sprintf("Job %s succeeded%s", name, said)}, true, nil
		}
		why := c.Reason
		if c.Message != "" {
			why += ": " + c.Message
		}
		return Outcome{Message: fmt.Sprintf("Job %s failed (%s)%s", name, why, said)}, true, nil
	}
	return Outcome{}, false, nil
}

// Forget deletes the Jobs of the Serving of UID uid (it is being deleted): they can no longer
// judge anything.
func (j *JobRunner) Forget(ctx context.Context, uid types.UID) error {
	err := j.Client.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(j.Namespace), client.MatchingLabels{LabelServingUID: string(uid)},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil {
		return fmt.Errorf("delete the verification Jobs of Serving %s in %s: %w", uid, j.Namespace, err)
	}
	return nil
}

// differs says how a Job read from the API server is not the one Kokumi builds (want), or
// nothing: the labels that tie it to its run, and every field of the Pod's template that
// decides what runs and as whom. Fields the API server defaults are not compared.
func differs(want, got *batchv1.Job) string {
	for k, v := range want.Labels {
		if got.Labels[k] != v {
			return fmt.Sprintf("its label %s is %q, not %q", k, got.Labels[k], v)
		}
	}
	ws, gs := &want.Spec, &got.Spec
	if !equality.Semantic.DeepEqual(ws.BackoffLimit, gs.BackoffLimit) || !equality.Semantic.DeepEqual(ws.ActiveDeadlineSeconds, gs.ActiveDeadlineSeconds) {
		return "its backoffLimit or activeDeadlineSeconds is not what Kokumi set"
	}
	wp, gp := &ws.Template.Spec, &gs.Template.Spec
	if wp.ServiceAccountName != gp.ServiceAccountName {
		return fmt.Sprintf("it runs as ServiceAccount %q, not %q", gp.ServiceAccountName, wp.ServiceAccountName)
	}
	if len(gp.InitContainers) > 0 || len(gp.Containers) != len(wp.Containers) || len(gp.Volumes) != len(wp.Volumes) {
		return "its Pod runs other containers or volumes than Kokumi's"
	}
	for i := range wp.Containers {
		w, g := &wp.Containers[i], &gp.Containers[i]
		if w.Image != g.Image || !slices.Equal(w.Command, g.Command) || !slices.Equal(w.Args, g.Args) ||
			!equality.Semantic.DeepEqual(w.Env, g.Env) || len(g.EnvFrom) > 0 || len(g.VolumeMounts) > 0 {
			return fmt.Sprintf("its container %s runs another image, command, arguments or environment", g.Name)
		}
		if !equality.Semantic.DeepEqual(w.SecurityContext, g.SecurityContext) {
			return fmt.Sprintf("its container %s has another security context", g.Name)
		}
	}
	return ""
}

// output returns the first lines of what the Job's container said last (its termination
// message: the tail of its log when it failed), or nothing; only Pods the Job controls count.
// A failed read of the Pods is an error: the outcome is read again, not recorded, for good,
// without the Pod's words.
func (j *JobRunner) output(ctx context.Context, job *batchv1.Job) (string, error) {
	var pods corev1.PodList
	if err := j.Reader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return "", fmt.Errorf("read the Pods of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	for _, p := range pods.Items {
		if owner := metav1.GetControllerOf(&p); owner == nil || owner.UID != job.UID {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
				return ": " + firstLines(t.Message, 5), nil
			}
		}
	}
	return "", nil
}

// jobFor is the Job of run n: the container as the Environment says, as the ServiceAccount it
// names in Kokumi's namespace, with a restricted security context, the release's facts in its
// environment, labelled with its Serving (a Job cannot be owned across namespaces: it goes a day
// after it finished, or with its Serving, Forget).
func (j *JobRunner) jobFor(spec *v1.Verification, wave string, run int32, facts Facts) *batchv1.Job {
	js := spec.Job
	timeout := jobTimeout(spec)
	sa := js.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	var env []corev1.EnvVar
	for _, nv := range facts.withWave(wave).env() {
		env = append(env, corev1.EnvVar{Name: nv.name, Value: nv.value})
	}
	for _, e := range js.Env {
		ev := corev1.EnvVar{Name: e.Name, Value: e.Value}
		if ref := e.SecretKeyRef; ref != nil {
			ev.Value, ev.ValueFrom = "", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}
		}
		env = append(env, ev)
	}
	labels := map[string]string{LabelVerification: spec.Name}
	if s := facts.Serving; s != nil {
		labels[LabelServing], labels[LabelServingNamespace], labels[LabelServingUID] = s.Name, s.Namespace, string(s.UID)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(facts, wave, spec.Name, run), Namespace: j.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(int64(timeout.Seconds())),
			TTLSecondsAfterFinished: ptr.To[int32](86400),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:      corev1.RestartPolicyNever,
					ServiceAccountName: sa,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: "verify", Image: js.Image, Command: js.Command, Args: js.Args, Env: env,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// withWave is the facts of the gate of wave.
func (f Facts) withWave(wave string) Facts {
	f.Wave = wave
	return f
}
