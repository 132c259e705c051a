package v1alpha1

// Condition types.
const (
	// ConditionReady is the one summary condition every Kokumi kind reports.
	ConditionReady = "Ready"
	// ConditionNotifications is the Environment's, when a webhook of spec.notifications names a
	// key (secretRef): whether every such key is in Kokumi's namespace and is a webhook key. It
	// says nothing of the webhooks' answers (NotificationFailed Events do), and holds no
	// roll-out back.
	ConditionNotifications = "Notifications"
)

// Environment Notifications reasons.
const (
	// ReasonWebhookKeysFound: every secretRef of spec.notifications reads as a webhook key.
	ReasonWebhookKeysFound = "WebhookKeysFound"
	// ReasonWebhookKeyMissing: a secretRef names a Secret or key that is not in Kokumi's
	// namespace, or a value that is no webhook key; its webhook is sent nothing until it is. The
	// message names the field and the fix.
	ReasonWebhookKeyMissing = "WebhookKeyMissing"
)

// Order Ready reasons.
const (
	// ReasonRendered: the newest input rendered into a Preparation.
	ReasonRendered = "Rendered"
	// ReasonSourceNotFound: the Product's source or version does not exist in its registry.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonProductNotFound: the Order names a Product that does not exist.
	ReasonProductNotFound = "ProductNotFound"
	// ReasonRenderFailed: the chart or bundle did not render.
	ReasonRenderFailed = "RenderFailed"
	// ReasonImageResolutionFailed: an image could not be resolved to a digest or vendored.
	ReasonImageResolutionFailed = "ImageResolutionFailed"
	// ReasonPushFailed: the artifact could not be pushed.
	ReasonPushFailed = "PushFailed"
	// ReasonBudgetExceeded: the source went over a render budget (pulled or uncompressed bytes,
	// layers, objects, output bytes); the message names the budget and the flag that raises it.
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonRenderTimeout: the render of the chart or bundle did not end within the
	// controller's --render-timeout (wall or CPU time); its process was killed.
	ReasonRenderTimeout = "RenderTimeout"
	// ReasonRegistryNotAllowed: the source, an image or the vendor registry is on a registry an
	// admin does not allow (--allowed-registries); nothing was fetched from it.
	ReasonRegistryNotAllowed = "RegistryNotAllowed"
	// ReasonSignatureMissing: the Product asks for verified sources (spec.verify) and the source
	// or a pinned image has no cosign signature; no Preparation was made.
	ReasonSignatureMissing = "SignatureMissing"
	// ReasonSignatureInvalid: a signature of the source or of a pinned image does not read or is
	// about another digest (tampered with, or copied from another artifact).
	ReasonSignatureInvalid = "SignatureInvalid"
	// ReasonUntrustedSigner: the source or a pinned image is signed, but by none of the keys
	// spec.verify trusts.
	ReasonUntrustedSigner = "UntrustedSigner"
	// ReasonTrustedKeysInvalid: spec.verify names a key ConfigMap that is missing, not marked
	// trusted by an admin, or holds no public key.
	ReasonTrustedKeysInvalid = "TrustedKeysInvalid"
)

// Serving Ready reasons.
const (
	// ReasonDeployed: every Ready, non-held cluster runs the Preparation synced and healthy.
	ReasonDeployed = "Deployed"
	// ReasonProgressing: the Preparation is rolling out.
	ReasonProgressing = "Progressing"
	// ReasonDeploymentFailed: a cluster is degraded or held, or no Cluster is Ready.
	ReasonDeploymentFailed = "DeploymentFailed"
	// ReasonNoPreparation: the Serving has no Preparation to deploy yet.
	ReasonNoPreparation = "NoPreparation"
	// ReasonPreparationNotFound: the Serving names a Preparation that does not exist.
	ReasonPreparationNotFound = "PreparationNotFound"
	// ReasonRolloutHalted: more clusters failed than the Environment's rollout.failureBudget
	// allows; no further cluster is changed until another Preparation is promoted.
	ReasonRolloutHalted = "RolloutHalted"
	// ReasonInvalidVerification: a verification of the Environment cannot run as written (a
	// successCondition that does not compile); the message names the field.
	ReasonInvalidVerification = "InvalidVerification"
	// ReasonRolloutAborted: a person aborted the roll-out (spec.rollout.abort of the Serving).
	ReasonRolloutAborted = "RolloutAborted"
	// ReasonRolledBack: the roll-out failed past its budget and, as the Environment's
	// rollout.onFailure asks, every cluster it changed went back to the last Preparation with a
	// deployment record in the Environment.
	ReasonRolledBack = "RolledBack"
)

// Gate reasons, shared by the Serving and the Environment: when one holds, nothing is deployed.
const (
	// ReasonArgoCDNotInstalled: the Application CRD or Argo CD's namespace is missing.
	ReasonArgoCDNotInstalled = "ArgoCDNotInstalled"
	// ReasonEnvironmentNotFound: the Order names an Environment that does not exist.
	ReasonEnvironmentNotFound = "EnvironmentNotFound"
	// ReasonInvalidSelector: the Environment's clusterSelector does not parse.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonNoClusters: the Environment selects no Cluster.
	ReasonNoClusters = "NoClusters"
	// ReasonProjectNotFound: the Environment's Argo CD AppProject does not exist.
	ReasonProjectNotFound = "ProjectNotFound"
	// ReasonProjectNotPermitted: the AppProject's sourceNamespaces do not admit the Order's namespace.
	ReasonProjectNotPermitted = "ProjectNotPermitted"
	// ReasonEnvironmentReady: the Environment can be deployed to.
	ReasonEnvironmentReady = "Ready"
)

// Promotion pipeline reasons.
const (
	// ReasonAwaitingStage: the Preparation has not passed a stage its Environment requires
	// (not deployed there, no verified record, or still soaking); the Serving keeps running
	// what it runs. An Order's and a Serving's Ready reason.
	ReasonAwaitingStage = "AwaitingStage"
	// ReasonRequirementCycle: the Environment's spec.requires leads back to itself, so no
	// Preparation could ever pass it. An Environment's Ready reason.
	ReasonRequirementCycle = "RequirementCycle"
	// ReasonRequiredEnvironmentNotFound: spec.requires names an Environment that does not exist
	// in the namespace. An Environment's Ready reason.
	ReasonRequiredEnvironmentNotFound = "RequiredEnvironmentNotFound"
)

// Target reasons: why one cluster does not run the Preparation healthily.
const (
	// ReasonClusterNotReady: held; the Cluster is not Ready. Does not fail the Serving.
	ReasonClusterNotReady = "ClusterNotReady"
	// ReasonRejected: held; Argo CD refuses the Application.
	ReasonRejected = "Rejected"
	// ReasonClusterConflict: held; another Cluster of the Environment has the same server and
	// sorts first by name: only that one deploys there (the rule of ReasonServerConflict).
	ReasonClusterConflict = "ClusterConflict"
	// ReasonOptInRequired: held; an Application of that name exists and is not Kokumi's.
	ReasonOptInRequired = "OptInRequired"
	// ReasonRegistryUnreachable: held; the images live in the bundled registry the cluster cannot reach.
	ReasonRegistryUnreachable = "RegistryUnreachable"
	// ReasonDegraded: Argo CD reports the Application Degraded or its sync failed.
	ReasonDegraded = "Degraded"
	// ReasonArgoCDError: Argo CD reports an error condition on the Application (such as a
	// ComparisonError when it cannot load the artifact): it cannot deploy it as it stands.
	ReasonArgoCDError = "ArgoCDError"
	// ReasonProgressDeadlineExceeded: the cluster stayed Progressing past the progress deadline.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonApplicationWriteFailed: Kokumi could not create or update the cluster's Application;
	// it retries with backoff, and the other clusters go on.
	ReasonApplicationWriteFailed = "ApplicationWriteFailed"
	// ReasonWaiting: the cluster's wave of the Environment's roll-out has not started, or its
	// wave has as many clusters updating as maxUnavailable allows, or the roll-out halted: its
	// Application is left as it is, running what it ran.
	ReasonWaiting = "Waiting"
	// ReasonOutOfSync: progressing; Argo CD deployed the revision, and now reports the cluster
	// OutOfSync at it with no operation running (or Synced at another revision): what runs
	// there changed. Past the drift threshold, the cluster is Drifted.
	ReasonOutOfSync = "OutOfSync"
	// ReasonSelfHealing: progressing; as ReasonOutOfSync, while Argo CD syncs the cluster again.
	// It does not start a drift, nor end one or restart its clock.
	ReasonSelfHealing = "SelfHealing"
	// ReasonDrifted: the cluster has been OutOfSync (ReasonOutOfSync) for longer than the
	// drift threshold: something on it keeps changing what Argo CD deployed. Also the Serving's
	// Ready reason when clusters drifted and none failed.
	ReasonDrifted = "Drifted"
)

// Cluster Ready reasons.
const (
	// ReasonConnected: the server answered /version with the credentials.
	ReasonConnected = "Connected"
	// ReasonUnreachable: the server could not be reached.
	ReasonUnreachable = "Unreachable"
	// ReasonUnauthorized: the server refused the credentials.
	ReasonUnauthorized = "Unauthorized"
	// ReasonCredentialsNotFound: the credentials Secret does not exist.
	ReasonCredentialsNotFound = "CredentialsNotFound"
	// ReasonInvalidCredentials: the credentials Secret holds nothing usable.
	ReasonInvalidCredentials = "InvalidCredentials"
	// ReasonServerConflict: another Cluster connects to the same server (as Argo CD compares
	// them) and sorts first by name, so this one gets no Argo CD cluster Secret: Argo CD keeps
	// one identity per server, and only the first by name has it and deploys there.
	ReasonServerConflict = "ServerConflict"
)

// Serving Ready reasons before anything can be deployed.
const (
	// ReasonOrderNotFound: the Serving's Order does not exist.
	ReasonOrderNotFound = "OrderNotFound"
)
