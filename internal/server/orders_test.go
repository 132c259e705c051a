package server

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The API server's refusal of an Order is put beside the form's fields: a rule of the whole
// Order (its path "<nil>", as the name's length rule has) and "already exists" beside Name.
func TestOrderCreateFieldErrorsGoBesideTheirFields(t *testing.T) {
	gk := schema.GroupKind{Group: v1.GroupVersion.Group, Kind: "Order"}
	invalid := apierrors.NewInvalid(gk, "x", field.ErrorList{
		field.Invalid(nil, "object", v1.OrderNameTooLong),
		field.Invalid(field.NewPath("spec", "targetNamespace"), "Not_A_Namespace", "must be a DNS label"),
		field.Invalid(field.NewPath("spec", "values"), "x", "not on the form"),
	})
	got := orderCreateFieldErrors(invalid, "team", "x")
	want := []FieldError{{"name", v1.OrderNameTooLong}, {"targetNamespace", `Invalid value: "Not_A_Namespace": must be a DNS label`}, {"spec.values", `Invalid value: "x": not on the form`}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("error %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	exists := orderCreateFieldErrors(apierrors.NewAlreadyExists(schema.GroupResource{Group: gk.Group, Resource: "orders"}, "web"), "team", "web")
	if len(exists) != 1 || exists[0].Field != "name" {
		t.Errorf("already exists: got %v, want it beside name", exists)
	}
	if errs := orderCreateFieldErrors(apierrors.NewForbidden(schema.GroupResource{Resource: "orders"}, "web", nil), "team", "web"); errs != nil {
		t.Errorf("forbidden is no field's: got %v", errs)
	}
}
