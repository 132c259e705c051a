// Package argocd is Kokumi's contract with Argo CD: the Applications it builds, what it reads
// back from them, the AppProject rules it checks, and the labels that mark Kokumi's objects.
package argocd

// Labels and annotations on the Argo CD objects Kokumi owns.
const (
	// LabelServing names the Serving an Application belongs to.
	LabelServing = "delivery.kokumi.dev/serving"
	// LabelServingNamespace names the namespace of that Serving.
	LabelServingNamespace = "delivery.kokumi.dev/serving-namespace"
	// LabelServingUID is the UID of that Serving: an Application outlives neither its Serving
	// nor a re-created Serving of the same name (BelongsTo, Orphaned).
	LabelServingUID = "delivery.kokumi.dev/serving-uid"
	// LabelCluster names the Kokumi Cluster an Application or cluster Secret is for.
	LabelCluster = "delivery.kokumi.dev/cluster"
	// LabelManagedBy marks every Argo CD object Kokumi owns (value ManagedByKokumi).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByKokumi is the value of LabelManagedBy on Kokumi's objects.
	ManagedByKokumi = "kokumi"
	// AnnotationOwner marks an Application as Kokumi's: "<serving namespace>/<serving name>".
	AnnotationOwner = "delivery.kokumi.dev/owner"

	// LabelSecretType is Argo CD's label that says what a Secret declares.
	LabelSecretType = "argocd.argoproj.io/secret-type"
	// SecretTypeCluster declares a cluster to Argo CD.
	SecretTypeCluster = "cluster"
	// SecretTypeRepository declares a repository to Argo CD.
	SecretTypeRepository = "repository"

	// DefaultNamespace is the namespace Argo CD runs in unless configured otherwise.
	DefaultNamespace = "argocd"
	// ResourcesFinalizer makes Argo CD delete an Application's resources with it; Kokumi never
	// sets it, nor its variants below, and removes any of them it finds (CascadeFinalizers).
	ResourcesFinalizer = "resources-finalizer.argocd.argoproj.io"
	// ResourcesFinalizerForeground is ResourcesFinalizer with foreground propagation.
	ResourcesFinalizerForeground = ResourcesFinalizer + "/foreground"
	// ResourcesFinalizerBackground is ResourcesFinalizer with background propagation.
	ResourcesFinalizerBackground = ResourcesFinalizer + "/background"
)
