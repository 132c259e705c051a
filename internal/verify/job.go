package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Labels of a verification's Job.
const (
	LabelServing      = "delivery.kokumi.dev/serving"
	LabelVerification = "delivery.kokumi.dev/verification"
)

// JobRunner runs job verifications as Jobs in the Order's namespace. It reads Jobs and their
// Pods straight from the API server (no cache of every Job and Pod of the hub).
type JobRunner struct {
	// Client creates the Jobs.
	Client client.Client
	// Reader reads them and their Pods.
	Reader client.Reader
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

// Start creates the Job of run n; one that exists already (a reconcile whose status write was
// lost made it) is taken as started.
func (j *JobRunner) Start(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts) error {
	job := jobFor(spec, wave, run, facts)
	if err := j.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Job %s/%s of verification %s: %w", job.Namespace, job.Name, spec.Name, err)
	}
	return nil
}

// Read reads the Job of run n: whether it finished, and what it said.
func (j *JobRunner) Read(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts) (Outcome, bool, error) {
	name := JobName(facts, wave, spec.Name, run)
	var job batchv1.Job
	if err := j.Reader.Get(ctx, client.ObjectKey{Namespace: facts.Namespace, Name: name}, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return Outcome{Message: fmt.Sprintf("Job %s/%s is gone before it finished", facts.Namespace, name)}, true, nil
		}
		return Outcome{}, false, fmt.Errorf("read Job %s/%s of verification %s: %w", facts.Namespace, name, spec.Name, err)
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

// output returns the first lines of what the Job's container said last (its termination
// message: the tail of its log when it failed), or nothing. A failed read of the Pods is an
// error: the outcome is read again, not recorded, for good, without the Pod's words.
func (j *JobRunner) output(ctx context.Context, job *batchv1.Job) (string, error) {
	var pods corev1.PodList
	if err := j.Reader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return "", fmt.Errorf("read the Pods of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
				return ": " + firstLines(t.Message, 5), nil
			}
		}
	}
	return "", nil
}

// jobFor is the Job of run n: the container as the Environment says, as the namespace's
// ServiceAccount, with a restricted security context, the release's facts in its environment,
// owned by the Serving.
func jobFor(spec *v1.Verification, wave string, run int32, facts Facts) *batchv1.Job {
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
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	labels := map[string]string{LabelVerification: spec.Name}
	if facts.Serving != nil {
		labels[LabelServing] = facts.Serving.Name
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(facts, wave, spec.Name, run), Namespace: facts.Namespace, Labels: labels},
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
	if s := facts.Serving; s != nil && s.UID != "" {
		job.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "Serving", Name: s.Name, UID: s.UID,
			BlockOwnerDeletion: ptr.To(false)}}
	}
	return job
}

// withWave is the facts of the gate of wave.
func (f Facts) withWave(wave string) Facts {
	f.Wave = wave
	return f
}
