package v1alpha1

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The server and the UI check an Order's name against MaxOrderNameLength, with the words of
// OrderNameTooLong, before the API server does with the CRD's rule: they must say the same.
func TestOrderNameRuleSaysMaxOrderNameLength(t *testing.T) {
	crd, err := os.ReadFile("../../config/crd/bases/delivery.kokumi.dev_orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The YAML folds the message and doubles its quotes.
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(crd), "''", "'")), " ")
	rule := fmt.Sprintf("size(self.metadata.name) <= %d", MaxOrderNameLength)
	if !strings.Contains(text, rule) {
		t.Errorf("the Order CRD has no rule %q", rule)
	}
	if !strings.Contains(text, OrderNameTooLong) {
		t.Errorf("the Order CRD's rule does not say %q", OrderNameTooLong)
	}
	if !strings.Contains(OrderNameTooLong, fmt.Sprint(MaxOrderNameLength)) {
		t.Errorf("OrderNameTooLong does not name %d", MaxOrderNameLength)
	}
}
