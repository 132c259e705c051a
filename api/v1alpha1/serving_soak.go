package v1alpha1

import (
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Deployed reports whether the status says Deployed: Ready is True with reason Deployed.
func (st *ServingStatus) Deployed() bool {
	c := apimeta.FindStatusCondition(st.Conditions, ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonDeployed
}

// TickSoakClock keeps the soak clock (DeployedRevision, DeployedSince) true to the status it is
// called on, once the rest of the status is decided: it starts at now when the Serving is
// Deployed at a revision it was not Deployed at without a break, and stops whenever the Serving
// is not Deployed. It is the one writer of the clock.
func (st *ServingStatus) TickSoakClock(now metav1.Time) {
	switch {
	case !st.Deployed() || st.Revision == "":
		st.DeployedRevision, st.DeployedSince = "", nil
	case st.DeployedRevision != st.Revision || st.DeployedSince == nil:
		st.DeployedRevision, st.DeployedSince = st.Revision, &now
	}
}

// DeployedAt returns since when the Serving has run revision Deployed without a break; ok is
// false when it does not run it Deployed. The soak of the stages that require the Serving's
// Environment counts from there.
func (st *ServingStatus) DeployedAt(revision string) (since time.Time, ok bool) {
	if revision == "" || st.DeployedRevision != revision || st.DeployedSince == nil || !st.Deployed() || st.Revision != revision {
		return time.Time{}, false
	}
	return st.DeployedSince.Time, true
}
