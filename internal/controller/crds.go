package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The controller reads its own CRDs, by name, to refuse to start against older ones.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get,resourceNames=clusters.delivery.kokumi.dev;environments.delivery.kokumi.dev;orders.delivery.kokumi.dev;preparations.delivery.kokumi.dev;products.delivery.kokumi.dev;servings.delivery.kokumi.dev

// KokumiCRDs are the names of Kokumi's CRDs.
var KokumiCRDs = []string{
	"clusters.delivery.kokumi.dev",
	"environments.delivery.kokumi.dev",
	"orders.delivery.kokumi.dev",
	"preparations.delivery.kokumi.dev",
	"products.delivery.kokumi.dev",
	"servings.delivery.kokumi.dev",
}

// upgradeCRDs is how to fix CRDs that are missing or older than this build needs.
const upgradeCRDs = "apply the CRDs of this release first: `kubectl apply --server-side -k config/crd`, " +
	"or `helm upgrade` the chart with crds.install=true (docs/install.md, \"Upgrades and the CRDs\")"

// CheckCRDs refuses, with one message naming every CRD at fault and the fix, to run against
// Kokumi CRDs that are missing, do not serve this build's API version, or carry a schema
// revision older than v1alpha1.SchemaRevision: the API server would prune the fields they lack
// from every object the controller writes, silently. Transient errors are retried for about
// 10 s.
func CheckCRDs(ctx context.Context, cfg *rest.Config) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("check Kokumi's CRDs: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("check Kokumi's CRDs: %w", err)
	}
	var problems []string
	for _, name := range KokumiCRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := getWithRetry(ctx, c, name, &crd); err != nil {
			if apierrors.IsNotFound(err) {
				problems = append(problems, name+" is not installed")
				continue
			}
			return fmt.Errorf("check CRD %s: %w", name, err)
		}
		if p := crdProblem(&crd); p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("this kokumi needs schema revision %d of its CRDs (API %s): %s; %s",
			v1.SchemaRevision, v1.GroupVersion, strings.Join(problems, "; "), upgradeCRDs)
	}
	return nil
}

// crdProblem says what makes one CRD too old for this build, or "".
func crdProblem(crd *apiextensionsv1.CustomResourceDefinition) string {
	served := false
	for _, v := range crd.Spec.Versions {
		if v.Name == v1.GroupVersion.Version && v.Served {
			served = true
		}
	}
	if !served {
		return fmt.Sprintf("%s does not serve %s", crd.Name, v1.GroupVersion.Version)
	}
	raw, ok := crd.Annotations[v1.SchemaRevisionAnnotation]
	if !ok {
		return fmt.Sprintf("%s has no %s annotation (installed before revisions were recorded)", crd.Name, v1.SchemaRevisionAnnotation)
	}
	rev, err := strconv.Atoi(raw)
	if err != nil {
		return fmt.Sprintf("%s has %s=%q, not a number", crd.Name, v1.SchemaRevisionAnnotation, raw)
	}
	if rev < v1.SchemaRevision {
		return fmt.Sprintf("%s is at schema revision %d", crd.Name, rev)
	}
	return ""
}

// getWithRetry gets a CRD, trying again after errors other than NotFound and Forbidden.
func getWithRetry(ctx context.Context, c client.Client, name string, crd *apiextensionsv1.CustomResourceDefinition) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = c.Get(ctx, client.ObjectKey{Name: name}, crd)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || errors.Is(err, context.Canceled) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
	return err
}
