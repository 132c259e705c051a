package browser

import "testing"

// The scenarios run in this order: the last one changes what web deploys.

func TestLogin(t *testing.T) { scenario(t, "login") }

func TestServingPage(t *testing.T) { scenario(t, "serving") }

func TestLiveUpdateKeepsFocusAndConfirmation(t *testing.T) { scenario(t, "live-update") }

func TestReconnectAfterRestartAndSignedOut(t *testing.T) { scenario(t, "reconnect") }

func TestPreviewAndDiff(t *testing.T) { scenario(t, "preview-diff") }

func TestOrderFormErrorsBesideFields(t *testing.T) { scenario(t, "order-form") }

func TestClusterDeploymentsShowHeld(t *testing.T) { scenario(t, "cluster-held") }

func TestFleetSearchFilterAndPages(t *testing.T) { scenario(t, "fleet") }

func TestPhoneWidthHasNoSidewaysScroll(t *testing.T) { scenario(t, "phone") }

func TestTimeMovesOnAQuietFleet(t *testing.T) { scenario(t, "clock") }

func TestOrdersBesideServings(t *testing.T) { scenario(t, "orders") }

func TestServingsCountHeld(t *testing.T) { scenario(t, "servings-held") }

func TestFocusThroughPromoteEscapeAndCancel(t *testing.T) { scenario(t, "focus-confirm") }

func TestPanelScrolledIntoViewAndFocusedOnAPhone(t *testing.T) { scenario(t, "focus-panel") }

func TestSkipLinkAndRouteFocus(t *testing.T) { scenario(t, "focus-route") }

func TestActionsThatCannotSucceedAreDisabled(t *testing.T) { scenario(t, "disabled") }

func TestOrderNameLimitAndErrorsBesideName(t *testing.T) { scenario(t, "order-name") }

func TestFirstVisitHasNoSignedOutBanner(t *testing.T) { scenario(t, "first-visit") }

func TestBidiCharactersFlagged(t *testing.T) { scenario(t, "bidi") }

func TestStagePassedWithOtherValuesSaysSo(t *testing.T) { scenario(t, "stage-other-values") }

func TestMisdirectedRequestHasSecurityHeaders(t *testing.T) { scenario(t, "misdirected") }

func TestPromoteConfirmationShowsTheRolloutPlan(t *testing.T) { scenario(t, "plan") }

func TestPromoteAndRollBack(t *testing.T) { scenario(t, "promote-rollback") }

func TestSecretsHiddenFromWhoMayNotReadThem(t *testing.T) { scenario(t, "secrets-hidden") }

func TestTheServingPageShowsTheWaves(t *testing.T) { scenario(t, "rollout") }

func TestPauseOnTheRolloutSection(t *testing.T) { scenario(t, "rollout-controls") }

func TestApproveOnTheRolloutSection(t *testing.T) { scenario(t, "approve") }

func TestWhatRunsAndWhatHappensNext(t *testing.T) { scenario(t, "runs") }

func TestANewcomersOrderCardsAndRefusedPages(t *testing.T) { scenario(t, "newcomer") }
