package rollout

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func servingOf(prep string, control *v1.RolloutControl, st *v1.RolloutStatus) *v1.Serving {
	return &v1.Serving{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       v1.ServingSpec{PreparationName: prep, Rollout: control},
		Status:     v1.ServingStatus{Rollout: st},
	}
}

func TestAskSetsTheControlAndNamesWhoAsked(t *testing.T) {
	c, changed, err := Ask(servingOf("web-2", nil, nil), Pause, "", "alice")
	if err != nil || !changed || !c.Paused || c.Abort != "" || c.By != "alice" {
		t.Fatalf("pause: %+v %v %v", c, changed, err)
	}
	c, changed, err = Ask(servingOf("web-2", c, nil), Pause, "", "bob")
	if err != nil || changed || c.By != "alice" {
		t.Errorf("pause of a paused roll-out: %+v %v %v, want no change", c, changed, err)
	}
	c, changed, err = Ask(servingOf("web-2", c, nil), Abort, "", "bob")
	if err != nil || !changed || !c.Paused || c.Abort != "web-2" || c.By != "bob" {
		t.Errorf("abort: %+v %v %v", c, changed, err)
	}
	c, changed, err = Ask(servingOf("web-2", &v1.RolloutControl{Paused: true, By: "alice"}, nil), Resume, "", "carol")
	if err != nil || !changed || c.Paused || c.By != "carol" {
		t.Errorf("resume: %+v %v %v", c, changed, err)
	}
	if _, changed, err := Ask(servingOf("web-2", nil, nil), Resume, "", "carol"); err != nil || changed {
		t.Errorf("resume of a roll-out not paused: %v %v, want no change", changed, err)
	}
	if c, _, err := Ask(servingOf("web-2", nil, nil), Abort, "web-2", "dave"); err != nil || c.Abort != "web-2" {
		t.Errorf("abort naming the current Preparation: %+v %v", c, err)
	}
}

func TestAskRefusesWhatCannotBeDone(t *testing.T) {
	for _, c := range []struct {
		name        string
		sv          *v1.Serving
		act         Action
		preparation string
		field, want string
	}{
		{"pause without a Preparation", servingOf("", nil, nil), Pause, "", "", "deploys no Preparation yet"},
		{"abort without a Preparation", servingOf("", nil, nil), Abort, "", "", "promote one first"},
		{"abort of another Preparation", servingOf("web-2", nil, nil), Abort, "web-1", "preparation", "rolls out Preparation web-2, not web-1"},
		{"abort of an aborted roll-out", servingOf("web-2", nil, &v1.RolloutStatus{Preparation: "web-2", State: v1.RolloutAborted, By: "erin"}), Abort, "", "", "already aborted by erin"},
		{"abort asked already", servingOf("web-2", &v1.RolloutControl{Abort: "web-2", By: "erin"}, nil), Abort, "", "", "clear spec.rollout.abort"},
	} {
		_, _, err := Ask(c.sv, c.act, c.preparation, "alice")
		var r *Refusal
		if !errors.As(err, &r) || r.Field != c.field || !strings.Contains(r.Message, c.want) {
			t.Errorf("%s: %v (%+v), want a refusal of %q saying %q", c.name, err, r, c.field, c.want)
		}
	}
	// An aborted roll-out of an earlier Preparation does not stop the abort of the current one.
	old := servingOf("web-3", &v1.RolloutControl{Abort: "web-2", By: "erin"}, &v1.RolloutStatus{Preparation: "web-2", State: v1.RolloutAborted})
	if c, changed, err := Ask(old, Abort, "", "alice"); err != nil || !changed || c.Abort != "web-3" {
		t.Errorf("abort after an earlier abort: %+v %v %v", c, changed, err)
	}
	if _, _, err := Ask(servingOf("web-2", nil, nil), Pause, "", ""); err == nil {
		t.Error("a pause by nobody was accepted")
	}
}
