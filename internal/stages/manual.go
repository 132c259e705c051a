package stages

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/promotion"
)

// This file holds the one rule of a promotion by hand, which the API server's promote and the
// kubectl plugin both apply before they patch a Serving's spec.preparationName. Unlike the rest
// of the package it reads the API server, through the reader and the Checker it is given.

// Checker decides whether a Preparation has passed the stages an Environment requires; the
// controller's Pipeline is one.
type Checker interface {
	Check(ctx context.Context, namespace, environment string, prep *v1.Preparation) (promotion.Verdict, error)
}

// Manual checks promotions by hand.
type Manual struct {
	// Client reads the Preparation.
	Client client.Reader
	// Stages checks the stages of the Order's Environment.
	Stages Checker
	// StagesTimeout bounds the stages' check, which may read registries; zero means no bound.
	StagesTimeout time.Duration
}

// Check decides whether the Preparation named preparation may be promoted by hand to the
// Serving of order, and returns it when it may: the Order promotes by hand (CheckMode), the
// Preparation exists in the Order's namespace, belongs to the Order, is Ready, and has passed
// the stages the Order's Environment requires (the Serving would hold it back otherwise,
// AwaitingStage). A refusal is a *promotion.Refusal; a failed read a *promotion.LookupError.
func (m Manual) Check(ctx context.Context, order *v1.Order, preparation string) (*v1.Preparation, error) {
	if err := promotion.CheckMode(order); err != nil {
		return nil, err
	}
	if preparation == "" {
		return nil, &promotion.Refusal{Message: "name one of the Order's Ready Preparations"}
	}
	var prep v1.Preparation
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: order.Namespace, Name: preparation}, &prep); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &promotion.Refusal{Message: fmt.Sprintf("no Preparation %q in %s", preparation, order.Namespace)}
		}
		return nil, &promotion.LookupError{What: "get Preparation " + preparation, Err: err}
	}
	if prep.Spec.OrderRef.Name != order.Name {
		return nil, &promotion.Refusal{Message: fmt.Sprintf("%s belongs to Order %s, not %s", prep.Name, prep.Spec.OrderRef.Name, order.Name)}
	}
	if c := apimeta.FindStatusCondition(prep.Status.Conditions, v1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		why := "it has not been checked yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		return nil, &promotion.Refusal{Message: fmt.Sprintf("%s is not Ready (%s)", prep.Name, why)}
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
		return nil, &promotion.LookupError{What: fmt.Sprintf("check the stages of Environment %s", environment), Err: err}
	}
	if !verdict.Allowed {
		return nil, &promotion.Refusal{Message: fmt.Sprintf("Preparation %s has not passed the stages of Environment %s: %s", prep.Name, environment, verdict.Message)}
	}
	return &prep, nil
}
