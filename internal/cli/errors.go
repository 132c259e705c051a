package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// kind names a Kokumi kind in messages and in the kubectl command that lists it.
type kind struct{ name, plural string }

var (
	kindServing     = kind{"Serving", "servings"}
	kindOrder       = kind{"Order", "orders"}
	kindPreparation = kind{"Preparation", "preparations"}
)

// explain turns an error of the API server into a sentence a newcomer can act on: what was
// being done, what went wrong, and what to try.
func explain(k kind, verb, namespace, name string, err error) error {
	ref := k.name + " " + namespace + "/" + name
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s not found in namespace %s: list them with kubectl get %s -n %s, or in every namespace with kubectl get %s -A",
			k.name, name, namespace, k.plural, namespace, k.plural)
	case apierrors.IsForbidden(err) && strings.Contains(apiMessage(err), "AdmissionPolicy"):
		// RBAC let it through; a policy refused what was written: its message says what to fix.
		return fmt.Errorf("an admission policy refused to let you %s %s: %s", verb, ref, apiMessage(err))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server refused to let you %s %s: %s. Ask an admin of namespace %s for a role that may %s %s (the edit role may promote, view only reads)",
			verb, ref, apiMessage(err), namespace, verb, k.plural)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server does not accept your credentials (%s): log in again or pick another --context", apiMessage(err))
	case apimeta.IsNoMatchError(err):
		return fmt.Errorf("the API server does not know Kokumi's %s: is Kokumi installed on this cluster (kubectl get crd %s.delivery.kokumi.dev)?", k.plural, k.plural)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %s: the API server did not answer in time: %w", verb, ref, err)
	}
	return fmt.Errorf("%s %s: %w", verb, ref, err)
}

// apiMessage is the API server's own message, without a trailing period.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &status) && status.Status().Message != "" {
		msg = status.Status().Message
	}
	return strings.TrimSuffix(msg, ".")
}

// getServing gets a Serving, explaining a failure.
func getServing(ctx context.Context, c client.Client, namespace, name string) (*v1.Serving, error) {
	var sv v1.Serving
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sv); err != nil {
		return nil, explain(kindServing, "get", namespace, name, err)
	}
	return &sv, nil
}

// getOrder gets an Order, explaining a failure.
func getOrder(ctx context.Context, c client.Client, namespace, name string) (*v1.Order, error) {
	var order v1.Order
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &order); err != nil {
		return nil, explain(kindOrder, "get", namespace, name, err)
	}
	return &order, nil
}

// getPreparation gets a Preparation, explaining a failure.
func getPreparation(ctx context.Context, c client.Client, namespace, name string) (*v1.Preparation, error) {
	var prep v1.Preparation
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &prep); err != nil {
		return nil, explain(kindPreparation, "get", namespace, name, err)
	}
	return &prep, nil
}
