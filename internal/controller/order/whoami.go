package order

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

// The Order reconciler learns its own name, which its Automatic promotions write into the
// Serving's spec.promotedBy, with a SelfSubjectReview.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// OwnName asks the API server of cfg how it names the writes made with cfg (a
// SelfSubjectReview, as kubectl auth whoami does), trying a few times over some seconds.
func OwnName(ctx context.Context, cfg *rest.Config) (string, error) {
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
