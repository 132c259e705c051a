package promotion

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the one rule of a promotion by hand, which the API server's promote and the
// kubectl plugin both apply before they patch a Serving's spec.preparationName. Unlike the rest
// of the package it reads the API server, through the reader and the Checker it is given.

// Checker decides whether a Preparation has passed the stages an Environment requires; the
// controller's Pipeline is one.
type Checker interface {
	Check(ctx context.Context, namespace, environment string, prep *v1.Preparation) (Verdict, error)
}

// Refusal is why a Preparation may not be promoted by hand: something the person can fix.
type Refusal struct {
	// Automatic is true when the Order promotes by itself, so a promotion by hand would be
	// undone: the Serving is not the person's to set. Otherwise the Preparation named is refused.
	Automatic bool
	// Message says why, and what to do.
	Message string
}

// Error implements error.
func (r *Refusal) Error() string { return r.Message }

// LookupError is a read that failed while checking a promotion: of the API server, or of the
// registry that holds the deployment records the stages need.
type LookupError struct {
	// What was being done, such as "get Preparation web-1".
	What string
	// Err is the error it failed with.
	Err error
}

// Error implements error.
func (e *LookupError) Error() string { return e.What + ": " + e.Err.Error() }

// Unwrap returns the underlying error, so that apierrors.IsNotFound and the like see it.
func (e *LookupError) Unwrap() error { return e.Err }

// Manual checks promotions by hand.
type Manual struct {
	// Client reads the Preparation.
	Client client.Reader
	// Stages checks the stages of the Order's Environment.
	Stages Checker
	// StagesTimeout bounds the stages' check, which may read registries; zero means no bound.
	StagesTimeout time.Duration
}

// CheckMode refuses an Order that promotes automatically: the controller would undo a
// promotion by hand.
func CheckMode(order *v1.Order) error {
	if order.Spec.Promotion.Mode == v1.PromotionAutomatic {
		return &Refusal{Automatic: true, Message: fmt.Sprintf("Order %s promotes automatically and would undo this: set its spec.promotion.mode to Manual first", order.Name)}
	}
	return nil
}

// Check decides whether the Preparation named preparation may be promoted by hand to the
// Serving of order, and returns it when it may: the Order promotes by hand (CheckMode), the
// Preparation exists in the Order's namespace, belongs to the Order, is Ready, and has passed
// the stages the Order's Environment requires (the Serving would hold it back otherwise,
// AwaitingStage). A refusal is a *Refusal; a failed read a *LookupError.
func (m Manual) Check(ctx context.Context, order *v1.Order, preparation string) (*v1.Preparation, error) {
	if err := CheckMode(order); err != nil {
		return nil, err
	}
	if preparation == "" {
		return nil, &Refusal{Message: "name one of the Order's Ready Preparations"}
	}
	var prep v1.Preparation
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: preparation}, &prep); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &Refusal{Message: fmt.Sprintf("no Preparation %q in %s", preparation, order.Namespace)}
		}
		return nil, &LookupError{What: "get Preparation " + preparation, Err: err}
	}
	if prep.Spec.OrderRef.Name != order.Name {
		return nil, &Refusal{Message: fmt.Sprintf("%s belongs to Order %s, not %s", prep.Name, prep.Spec.OrderRef.Name, order.Name)}
	}
	if c := apimeta.FindStatusCondition(prep.Status.Conditions, v1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		why := "it has not been checked yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		return nil, &Refusal{Message: fmt.Sprintf("%s is not Ready (%s)", prep.Name, why)}
	}
	environment := order.Spec.EnvironmentRef.Name
	checkCtx := ctx
	if m.StagesTimeout > 0 {
		var cancel context.CancelFunc
		checkCtx, cancel = context.WithTimeout(ctx, m.StagesTimeout)
		defer cancel()
	}
	verdict, err := m.Stages.Check(checkCtx, order.Namespace, environment, &prep)
	if err != nil {
		return nil, &LookupError{What: fmt.Sprintf("check the stages of Environment %s", environment), Err: err}
	}
	if !verdict.Allowed {
		return nil, &Refusal{Message: fmt.Sprintf("Preparation %s has not passed the stages of Environment %s: %s", prep.Name, environment, verdict.Message)}
	}
	return &prep, nil
}
