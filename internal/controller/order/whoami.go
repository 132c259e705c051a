package order

// The Order reconciler learns its own name (whoami.Name), which its Automatic promotions write
// into the Serving's spec.promotedBy, with a SelfSubjectReview.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create
