package install

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller"
)

// Every generated CRD carries the schema revision this build needs: bumping one without the
// other fails here.
func TestGeneratedCRDsCarryTheSchemaRevisionTheControllerNeeds(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(paths) != len(controller.KokumiCRDs) {
		t.Fatalf("%d CRDs in config/crd/bases, want %d: %v", len(paths), len(controller.KokumiCRDs), err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		if got := crd.Annotations[v1.SchemaRevisionAnnotation]; got != strconv.Itoa(v1.SchemaRevision) {
			t.Errorf("%s: %s=%q, want %d (v1alpha1.SchemaRevision)", crd.Name, v1.SchemaRevisionAnnotation, got, v1.SchemaRevision)
		}
	}
}

// The controller, with the rights the install gives it, refuses to start against CRDs older
// than it needs, naming each one and the fix, and starts against current ones.
func TestControllerRefusesOlderCRDs(t *testing.T) {
	ctx := context.Background()
	asController, err := env.ControllerConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.CheckCRDs(ctx, asController); err != nil {
		t.Fatalf("current CRDs refused: %v", err)
	}

	var admin client.Client
	setRevision := func(name, rev string) {
		t.Helper()
		var crd apiextensionsv1.CustomResourceDefinition
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(crd.DeepCopy())
		if rev == "" {
			delete(crd.Annotations, v1.SchemaRevisionAnnotation)
		} else {
			crd.Annotations[v1.SchemaRevisionAnnotation] = rev
		}
		if err := admin.Patch(ctx, &crd, patch); err != nil {
			t.Fatal(err)
		}
	}
	current := strconv.Itoa(v1.SchemaRevision)
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		setRevision("orders.delivery.kokumi.dev", current)
		setRevision("servings.delivery.kokumi.dev", current)
	})
	setRevision("orders.delivery.kokumi.dev", strconv.Itoa(v1.SchemaRevision-1))
	setRevision("servings.delivery.kokumi.dev", "")

	err = controller.CheckCRDs(ctx, asController)
	if err == nil {
		t.Fatal("the controller accepted older CRDs")
	}
	for _, want := range []string{
		"orders.delivery.kokumi.dev is at schema revision " + strconv.Itoa(v1.SchemaRevision-1),
		"servings.delivery.kokumi.dev has no " + v1.SchemaRevisionAnnotation,
		"kubectl apply --server-side -k config/crd",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "products.delivery.kokumi.dev") {
		t.Errorf("the refusal names a current CRD: %v", err)
	}
}
