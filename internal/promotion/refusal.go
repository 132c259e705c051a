package promotion

import (
	"fmt"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

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

// CheckMode refuses an Order that promotes automatically: the controller would undo a
// promotion by hand.
func CheckMode(order *v1.Order) error {
	if order.Spec.Promotion.Mode == v1.PromotionAutomatic {
		return &Refusal{Automatic: true, Message: fmt.Sprintf("Order %s promotes automatically and would undo this: set its spec.promotion.mode to Manual first", order.Name)}
	}
	return nil
}
