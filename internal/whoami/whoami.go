// Package whoami asks the API server how it names the writes made with a rest config (a
// SelfSubjectReview, as kubectl auth whoami does): the name Kokumi's own promotions, the
// tests' fixtures and the bench write into a Serving's spec.promotedBy.
package whoami

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Name asks the API server of cfg how it names the writes made with cfg (a
// SelfSubjectReview, as kubectl auth whoami does), trying a few times over some seconds.
func Name(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("client to ask the API server Kokumi's own name: %w", err)
	}
	var name string
	var last error
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6, Cap: 5 * time.Second}
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		name = review.Status.UserInfo.Username
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("ask the API server Kokumi's own name (SelfSubjectReview): %w", errors.Join(err, last))
	}
	if name == "" {
		return "", errors.New("the API server did not name Kokumi's own user (SelfSubjectReview)")
	}
	return name, nil
}
