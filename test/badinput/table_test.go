package badinput

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
)

// Where a user sees what is wrong: the API server's refusal, or the Ready condition of a kind.
const (
	refusedAt = "refused"
	onOrder   = "Order"
	onServing = "Serving"
	onEnv     = "Environment"
	onCluster = "Cluster"
)

// What keeps running, as the doc says it.
const (
	nothingRan = "nothing ran: nothing to keep"
	keepsAll   = "the Preparation that runs, its Applications (same revision, not replaced)"
	keepsApps  = "the Applications (same revision, not replaced)"
	keepsGated = "the workloads: the Applications, which carry no resources finalizer, are deleted and come back at the same revision once it is fixed"
)

// deadline is how long a bad input may take to show, on a loaded two-core machine.
const deadline = 90 * time.Second

// badInput is one row of the table: a bad input, where the user sees it and what the message
// names, and what keeps running. docs/bad-input.md is generated from these fields.
type badInput struct {
	name     string   // the subtest
	kind     string   // the kind whose input is bad (Secret: a Cluster's credentials)
	input    string   // the bad input, as the doc says it
	on       string   // refusedAt, or the kind whose Ready condition says it
	reason   string   // the Ready reason (none when refused)
	mentions []string // what the message names: the field and the fix
	keeps    string   // what keeps running
	// also are other kinds whose Ready condition says it too, with their reason.
	also map[string]string
	// late runs the case after every other: while it waits it holds one of the Order
	// reconciler's two workers, or it briefly breaks the controller's cache of a kind.
	late bool
	run  func(x *check)
}

const kubeconfigWithExec = `apiVersion: v1
kind: Config
current-context: edge
contexts:
- name: edge
  context: {cluster: edge, user: edge}
clusters:
- name: edge
  cluster: {server: "https://edge.example:6443"}
users:
- name: edge
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: aws
      args: [eks, get-token, --cluster-name, edge]
`

var table = []badInput{
	// Product
	{
		name: "product-url-not-a-string", kind: "Product", input: "`spec.source.url: 42`",
		on: refusedAt, mentions: []string{"spec.source.url", "string"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createUnstructured("Product", "web", map[string]any{"source": map[string]any{"url": 42}}))
		},
	},
	{
		name: "product-values-a-list", kind: "Product", input: "`spec.render.helm.values` is a list, not an object",
		on: refusedAt, mentions: []string{"spec.render.helm.values", "object"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createUnstructured("Product", "web", map[string]any{
				"source": map[string]any{"url": webChart, "version": "1.0.0"},
				"render": map[string]any{"helm": map[string]any{"values": []any{"replicaCount", 3}}},
			}))
		},
	},
	{
		name: "product-values-too-large", kind: "Product", input: "4 MiB of `spec.render.helm.values`",
		on: refusedAt, mentions: []string{"too large"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(x.withValues(func(v map[string]any) { v["blob"] = strings.Repeat("x", 4<<20) })))
		},
	},
	{
		name: "product-long-name", kind: "Product", input: "a Product name of 200 characters (the label of its Preparations holds 63)",
		on: refusedAt, mentions: []string{"63 characters"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct(strings.Repeat("p", 200), webValues())
			x.refused(x.createTyped(p))
		},
	},
	{
		name: "product-version-missing", kind: "Product", input: "`spec.source.version` is a digest the registry does not hold",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{"spec.source.version", "sha256:000000000000"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct("web", webValues())
			p.Spec.Source.Version = "sha256:" + strings.Repeat("0", 64)
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-registry-unresolvable", kind: "Product", input: "`spec.source.url` names a host that does not resolve",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{"registry.invalid", "spec.source.url"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct("web", webValues())
			p.Spec.Source.URL = "oci://registry.invalid/charts/web"
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-registry-500", kind: "Product", input: "the source's registry answers 500 to everything",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{"500", "registry is reachable"}, keeps: keepsAll,
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.breakProduct(func(p *v1.Product) { p.Spec.Source.URL = "oci://" + host(failing.URL) + "/charts/web" })
			x.sees(order(x.ns, "web"))
			x.orderKeeps(r)
		},
	},
	{
		name: "product-registry-hangs", kind: "Product", input: "the source's registry accepts connections and never answers",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{"registry is reachable"}, keeps: nothingRan, late: true,
		run: func(x *check) {
			p := x.webProduct("web", webValues())
			p.Spec.Source.URL = "oci://" + host(hanging.URL) + "/charts/web"
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-credentials-missing", kind: "Product", input: "`spec.source.credentialsRef` names no Secret",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{`"nope"`, "spec.source.credentialsRef"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct("web", webValues())
			p.Spec.Source.CredentialsRef = &v1.LocalObjectReference{Name: "nope"}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-credentials-garbage", kind: "Product", input: "the credentials Secret's `auth` is not base64",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{".dockerconfigjson", "spec.source.credentialsRef"}, keeps: nothingRan,
		run: func(x *check) {
			x.putSecret(x.ns, "pull", corev1.SecretTypeDockerConfigJson, map[string][]byte{
				corev1.DockerConfigJsonKey: []byte(`{"auths": {"` + sources.Addr + `": {"auth": "%%% not base64 %%%"}}}`),
			})
			p := x.webProduct("web", webValues())
			p.Spec.Source.CredentialsRef = &v1.LocalObjectReference{Name: "pull"}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-credentials-wrong-type", kind: "Product", input: "the credentials Secret holds `username` and `password`, no `.dockerconfigjson`",
		on: onOrder, reason: v1.ReasonSourceNotFound, mentions: []string{".dockerconfigjson", "kubernetes.io/dockerconfigjson"}, keeps: nothingRan,
		run: func(x *check) {
			x.putSecret(x.ns, "pull", corev1.SecretTypeOpaque, map[string][]byte{"username": []byte("me"), "password": []byte("secret")})
			p := x.webProduct("web", webValues())
			p.Spec.Source.CredentialsRef = &v1.LocalObjectReference{Name: "pull"}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-values-wrong-type", kind: "Product", input: "`replicaCount: many` where the chart's values schema wants an integer",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"replicaCount", "spec.render"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(x.withValues(func(v map[string]any) { v["replicaCount"] = "many" }))
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-chart-fails", kind: "Product", input: "values the chart fails on (`required`: an ingress without a host)",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"ingress.host is required", "spec.render"}, keeps: keepsAll,
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.breakProduct(func(p *v1.Product) {
				v := webValues()
				v["ingress"] = map[string]any{"enabled": true}
				p.Spec.Render.Helm.Values = rawJSON(v)
			})
			x.sees(order(x.ns, "web"))
			x.orderKeeps(r)
		},
	},
	{
		name: "product-helm-on-a-bundle", kind: "Product", input: "`spec.render.helm` set on a manifest bundle",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"spec.render.helm", "not a Helm chart"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct("web", nil)
			p.Spec.Source = v1.ProductSource{URL: webBundle, Version: "v1"}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-bundle-bad-yaml", kind: "Product", input: "a manifest bundle whose YAML does not parse",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"YAML document", "fix the chart or bundle"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(&v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns},
				Spec: v1.ProductSpec{Source: v1.ProductSource{URL: brokenBundle, Version: "v1"}}})
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-no-manifests", kind: "Product", input: "a source that holds neither a chart nor YAML",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"neither a Helm chart", "fix the chart or bundle"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(&v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns},
				Spec: v1.ProductSpec{Source: v1.ProductSource{URL: emptySource, Version: "v1"}}})
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-too-many-objects", kind: "Product", input: "a chart that renders 10,001 objects (the budget is 10,000)",
		on: onOrder, reason: v1.ReasonBudgetExceeded, mentions: []string{"render budget of objects", "--render-max-objects"}, keeps: nothingRan,
		run: func(x *check) {
			p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns}, Spec: v1.ProductSpec{
				Source: v1.ProductSource{URL: manyChart, Version: "1.0.0"},
				Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: rawJSON(map[string]any{"count": cfg.RenderBudgets.Objects + 1})}},
			}}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-image-missing", kind: "Product", input: "values name an image its registry does not hold",
		on: onOrder, reason: v1.ReasonImageResolutionFailed, mentions: []string{"team/gone:1", "fix the image"}, keeps: keepsAll,
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.breakProduct(func(p *v1.Product) {
				v := webValues()
				v["image"] = sources.Addr + "/team/gone:1"
				p.Spec.Render.Helm.Values = rawJSON(v)
			})
			x.sees(order(x.ns, "web"))
			x.orderKeeps(r)
		},
	},
	{
		name: "product-image-unparsable", kind: "Product", input: "values name the image `Team/Web:1.0!`",
		on: onOrder, reason: v1.ReasonImageResolutionFailed, mentions: []string{"Team/Web:1.0!", "fix the image"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(x.withValues(func(v map[string]any) { v["image"] = "Team/Web:1.0!" }))
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-image-registry-500", kind: "Product", input: "an image's registry answers 500 to everything",
		on: onOrder, reason: v1.ReasonImageResolutionFailed, mentions: []string{"500", "fix the image"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(x.withValues(func(v map[string]any) { v["image"] = host(failing.URL) + "/team/web:1.0" }))
			if msg := x.sees(order(x.ns, "web")).Message; !strings.Contains(msg, host(failing.URL)) {
				x.t.Errorf("the message does not name the image's registry %s: %s", host(failing.URL), msg)
			}
		},
	},
	{
		name: "product-image-registry-hangs", kind: "Product", input: "an image's registry accepts connections and never answers",
		on: onOrder, reason: v1.ReasonImageResolutionFailed, mentions: []string{"fix the image"}, keeps: nothingRan, late: true,
		run: func(x *check) {
			x.fresh(x.withValues(func(v map[string]any) { v["image"] = host(hanging.URL) + "/team/web:1.0" }))
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-vendor-unreachable", kind: "Product", input: "`spec.images.registry` (Vendor) refuses connections",
		on: onOrder, reason: v1.ReasonImageResolutionFailed, mentions: []string{"127.0.0.1:1", "accepts pushes"}, keeps: nothingRan,
		run: func(x *check) {
			p := x.webProduct("web", webValues())
			p.Spec.Images = v1.ImageSpec{Policy: v1.ImagePolicyVendor, Registry: "127.0.0.1:1"}
			x.fresh(p)
			x.sees(order(x.ns, "web"))
		},
	},
	{
		name: "product-failure-long-unicode", kind: "Product", input: "a chart failing with 2 KiB of emoji and accents",
		on: onOrder, reason: v1.ReasonRenderFailed, mentions: []string{"💥 ünïcödé", "spec.render"}, keeps: nothingRan,
		run: func(x *check) {
			x.fresh(x.withValues(func(v map[string]any) { v["failWith"] = strings.Repeat("💥 ünïcödé ", 150) }))
			x.sees(order(x.ns, "web"))
		},
	},

	// Order
	{
		name: "order-productref-not-a-string", kind: "Order", input: "`spec.productRef.name: 7`",
		on: refusedAt, mentions: []string{"spec.productRef.name", "string"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createUnstructured("Order", "web", map[string]any{
				"productRef": map[string]any{"name": 7}, "environmentRef": map[string]any{"name": "edge"},
			}))
		},
	},
	{
		name: "order-unicode-name", kind: "Order", input: "an Order named `заказ`",
		on: refusedAt, mentions: []string{"metadata.name", "RFC 1123"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "заказ", Namespace: x.ns}, Spec: v1.OrderSpec{
				ProductRef: v1.LocalObjectReference{Name: "web"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
			}}))
		},
	},
	{
		name: "order-unicode-target-namespace", kind: "Order", input: "`spec.targetNamespace: prod-ü`",
		on: refusedAt, mentions: []string{"spec.targetNamespace"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns}, Spec: v1.OrderSpec{
				ProductRef: v1.LocalObjectReference{Name: "web"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"}, TargetNamespace: "prod-ü",
			}}))
		},
	},
	{
		name: "order-environment-missing", kind: "Order", input: "`spec.environmentRef` names no Environment",
		on: onServing, reason: v1.ReasonEnvironmentNotFound, mentions: []string{"nowhere", "ask an admin to create it"}, keeps: nothingRan,
		run: func(x *check) {
			x.create(x.webProduct("web", webValues()))
			x.broke()
			x.order("web", "web", "nowhere", v1.PromotionAutomatic)
			x.sees(serving(x.ns, "web"))
		},
	},
	{
		name: "order-product-deleted", kind: "Order", input: "the Product of a working Order is deleted",
		on: onOrder, reason: v1.ReasonProductNotFound, mentions: []string{`"web"`, "spec.productRef.name"}, keeps: keepsAll,
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.broke()
			x.must(env.Client.Delete(x.ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns}}))
			x.sees(order(x.ns, "web"))
			x.orderKeeps(r)
		},
	},
	{
		name: "order-longest-names", kind: "Order", input: "the longest names: a 63-character namespace, a 53-character Order, a 63-character Cluster",
		on: onServing, reason: v1.ReasonDeployed, mentions: []string{"Deployed Preparation"}, keeps: "not bad: it deploys",
		run: func(x *check) {
			long := newFixture(x.t, "bi-longest-"+strings.Repeat("n", 52))
			clusterName := "c" + strings.Repeat("l", 62)
			long.cluster(clusterName)
			long.environment("edge")
			long.create(long.webProduct("web", webValues()))
			orderName := "o" + strings.Repeat("r", 52)
			x.broke()
			long.order(orderName, "web", "edge", v1.PromotionAutomatic)
			r := long.deployed(orderName)
			x.fixture = long
			if msg := x.sees(serving(long.ns, orderName)).Message; !strings.Contains(msg, clusterName) {
				x.t.Errorf("the message does not name the Cluster %s: %s", clusterName, msg)
			}
			for name := range r.apps {
				if len(name) > 253 {
					x.t.Errorf("Application name %s is longer than 253", name)
				}
			}
			if len(r.apps) != 1 {
				x.t.Errorf("%d Applications, want 1", len(r.apps))
			}
		},
	},

	// Preparation
	{
		name: "preparation-images-not-a-list", kind: "Preparation", input: "`spec.images: nginx`",
		on: refusedAt, mentions: []string{"spec.images", "array"}, keeps: nothingRan,
		run: func(x *check) {
			digest := "sha256:" + strings.Repeat("a", 64)
			x.refused(x.createUnstructured("Preparation", "web-aaaaaaaaaa", map[string]any{
				"orderRef": map[string]any{"name": "web"}, "productRef": map[string]any{"name": "web"},
				"source":          map[string]any{"url": webChart, "version": "1.0.0", "digest": digest},
				"targetNamespace": "web", "images": "nginx", "configHash": "x",
				"artifact": map[string]any{"ref": "oci://" + bundled.Addr + "/kokumi/x/web@" + digest, "digest": digest},
			}))
		},
	},
	{
		name: "preparation-deleted-while-deployed", kind: "Preparation", input: "the Preparation a Serving deploys is deleted, the Order having rendered a newer one",
		on: onServing, reason: v1.ReasonPreparationNotFound, mentions: []string{"spec.preparationName"}, keeps: keepsApps,
		run: func(x *check) {
			r := x.working(v1.PromotionManual, x.ns)
			// The Order renders its latest Preparation again when it is deleted (the same name, the
			// same artifact), and the Serving deploys it on: a deleted Preparation stays gone when
			// the Order has rendered a newer one, which the Serving (Manual) does not deploy yet.
			x.editProduct("web", func(p *v1.Product) {
				v := webValues()
				v["message"] = "newer"
				p.Spec.Render.Helm.Values = rawJSON(v)
			})
			waitFor(x.t, "a newer Preparation of Order web", time.Now().Add(deadline), func() error {
				o := order(x.ns, "web")
				if err := env.Client.Get(x.ctx, client.ObjectKeyFromObject(o), o); err != nil {
					return err
				}
				if o.Status.LatestPreparation == "" || o.Status.LatestPreparation == r.preparation {
					return fmt.Errorf("its latest Preparation is %q", o.Status.LatestPreparation)
				}
				return nil
			})
			x.broke()
			x.must(env.Client.Delete(x.ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: r.preparation, Namespace: x.ns}}))
			x.sees(serving(x.ns, "web"))
			x.sameApps(r)
		},
	},
	{
		name: "preparation-of-another-order", kind: "Preparation", input: "a Serving promoted to another Order's Preparation",
		on: onServing, reason: v1.ReasonPreparationNotFound, mentions: []string{"rendered for Order other", "promote a Preparation of this Order"}, keeps: keepsApps,
		run: func(x *check) {
			r := x.working(v1.PromotionManual, x.ns)
			x.order("other", "web", "edge", v1.PromotionManual)
			o := order(x.ns, "other")
			x.waitReason(o, v1.ReasonRendered)
			x.broke()
			x.promote("web", o.Status.LatestPreparation)
			x.sees(serving(x.ns, "web"))
			x.sameApps(r)
		},
	},

	// Serving
	{
		name: "serving-preparation-typo", kind: "Serving", input: "`spec.preparationName` names no Preparation",
		on: onServing, reason: v1.ReasonPreparationNotFound, mentions: []string{"web-typo", "spec.preparationName"}, keeps: keepsApps,
		run: func(x *check) {
			r := x.working(v1.PromotionManual, x.ns)
			x.broke()
			x.promote("web", "web-typo")
			x.sees(serving(x.ns, "web"))
			x.sameApps(r)
		},
	},
	{
		name: "serving-without-order", kind: "Serving", input: "a Serving whose Order does not exist",
		on: onServing, reason: v1.ReasonOrderNotFound, mentions: []string{"lonely", "spec.orderRef"}, keeps: nothingRan,
		run: func(x *check) {
			x.broke()
			x.create(&v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: x.ns},
				Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "lonely"}}})
			x.sees(serving(x.ns, "lonely"))
		},
	},
	{
		name: "serving-preparation-name-too-long", kind: "Serving", input: "`spec.preparationName` of 254 characters",
		on: refusedAt, mentions: []string{"spec.preparationName", "253"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: x.ns},
				Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "web"}, PreparationName: strings.Repeat("p", 254)}}))
		},
	},
	{
		name: "serving-orderref-not-an-object", kind: "Serving", input: "`spec.orderRef: web`, a string",
		on: refusedAt, mentions: []string{"spec.orderRef", "object"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createUnstructured("Serving", "web", map[string]any{"orderRef": "web"}))
		},
	},

	// Environment
	{
		name: "environment-verify-cel-broken", kind: "Environment", input: "`spec.verify[0].http.successCondition: response.status ==` (a CEL expression cut short)",
		on: onEnv, reason: v1.ReasonInvalidVerification, mentions: []string{"spec.verify[0].http.successCondition", "does not compile", "response.status"}, keeps: keepsApps,
		also: map[string]string{onServing: v1.ReasonInvalidVerification},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.broke()
			x.editEnvironment(func(e *v1.Environment) {
				e.Spec.Verify = []v1.Verification{{Name: "smoke", HTTP: &v1.HTTPVerification{URL: "http://127.0.0.1:1/smoke", SuccessCondition: "response.status =="}}}
			})
			x.sees(environment(x.ns, "edge"))
			x.alsoSees(serving(x.ns, "web"))
			x.sameApps(r)
			x.editEnvironment(func(e *v1.Environment) { e.Spec.Verify = nil })
			x.restored(r)
		},
	},
	{
		name: "environment-verify-unknown-placeholder", kind: "Environment", input: "`spec.verify[0].http.url` with `${clusters}`, a placeholder Kokumi does not know",
		on: onEnv, reason: v1.ReasonInvalidVerification, mentions: []string{"spec.verify[0].http.url", "${clusters}", "${cluster}, ${label:KEY}"}, keeps: keepsApps,
		also: map[string]string{onServing: v1.ReasonInvalidVerification},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.broke()
			x.editEnvironment(func(e *v1.Environment) {
				e.Spec.Verify = []v1.Verification{{Name: "errors", PerCluster: true,
					HTTP: &v1.HTTPVerification{URL: "http://127.0.0.1:1/api/v1/query?query=up{cluster=\"${clusters}\"}", SuccessCondition: "response.status == 200"}}}
			})
			x.sees(environment(x.ns, "edge"))
			x.alsoSees(serving(x.ns, "web"))
			x.sameApps(r)
			x.editEnvironment(func(e *v1.Environment) { e.Spec.Verify = nil })
			x.restored(r)
		},
	},
	{
		name: "environment-verify-compare-without-per-cluster", kind: "Environment", input: "`spec.verify[0].compare` without `perCluster: true`",
		on: refusedAt, mentions: []string{"compare judges the answers of each cluster", "perCluster: true"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: x.ns}, Spec: v1.EnvironmentSpec{
				Project: x.project, Verify: []v1.Verification{{Name: "errors", Compare: "true",
					HTTP: &v1.HTTPVerification{URL: "http://prometheus:9090/", SuccessCondition: "true"}}},
			}}))
		},
	},
	{
		name: "environment-invalid-selector", kind: "Environment", input: "`spec.clusterSelector` with the operator `Maybe`",
		on: onEnv, reason: v1.ReasonInvalidSelector, mentions: []string{"spec.clusterSelector", "In or NotIn"}, keeps: keepsGated,
		also: map[string]string{onServing: v1.ReasonInvalidSelector},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.broke()
			x.editEnvironment(func(e *v1.Environment) {
				e.Spec.ClusterSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Maybe", Values: []string{x.ns}}}}
			})
			x.sees(environment(x.ns, "edge"))
			x.alsoSees(serving(x.ns, "web"))
			x.editEnvironment(func(e *v1.Environment) {
				e.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": x.ns}}
			})
			x.restored(r)
		},
	},
	{
		name: "environment-selects-nothing-then-everything", kind: "Environment", input: "`spec.clusterSelector` matches nothing, then `{}` (every Cluster)",
		on: onEnv, reason: v1.ReasonNoClusters, mentions: []string{"spec.clusterSelector", "selects no Cluster"}, keeps: keepsGated,
		also: map[string]string{onServing: v1.ReasonNoClusters},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			other := x.ns + "-x"
			m := newMember()
			x.putSecret(cfg.Namespace, other, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken), cluster.KeyCA: m.CA()})
			x.clusterAt(other, m.URL(), map[string]string{"tier": x.ns + "-elsewhere"})
			x.broke()
			x.editEnvironment(func(e *v1.Environment) {
				e.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": "nobody"}}
			})
			x.sees(environment(x.ns, "edge"))
			x.alsoSees(serving(x.ns, "web"))
			x.editEnvironment(func(e *v1.Environment) { e.Spec.ClusterSelector = metav1.LabelSelector{} })
			x.seesReason(environment(x.ns, "edge"), v1.ReasonEnvironmentReady)
			waitFor(x.t, "Applications on every Cluster, "+other+" among them", time.Now().Add(setUpTimeout), func() error {
				for name := range r.apps {
					if _, ok := findApp(x.apps("web"), name); !ok {
						return fmt.Errorf("no Application %s", name)
					}
				}
				for _, app := range x.apps("web") {
					if app.GetLabels()["delivery.kokumi.dev/cluster"] == other {
						return nil
					}
				}
				return fmt.Errorf("no Application on %s", other)
			})
			x.stillRuns(running{serving: r.serving, preparation: r.preparation, revision: r.revision, apps: map[string]types.UID{}})
		},
	},
	{
		name: "environment-project-missing-unicode", kind: "Environment", input: "`spec.project: проект-прод`, no such AppProject",
		on: onEnv, reason: v1.ReasonProjectNotFound, mentions: []string{"spec.project", "проект-прод"}, keeps: nothingRan,
		run: func(x *check) {
			x.cluster(x.ns)
			x.broke()
			x.create(&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: x.ns}, Spec: v1.EnvironmentSpec{
				ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": x.ns}}, Project: "проект-прод",
			}})
			x.sees(environment(x.ns, "edge"))
		},
	},
	{
		name: "environment-appproject-deleted-mid-rollout", kind: "Environment", input: "the Environment's AppProject is deleted while its Applications roll out",
		on: onServing, reason: v1.ReasonProjectNotFound, mentions: []string{"spec.project", "create it"}, keeps: keepsGated,
		also: map[string]string{onEnv: v1.ReasonProjectNotFound},
		run: func(x *check) {
			x.cluster(x.ns)
			x.environment("edge")
			x.create(x.webProduct("web", webValues()))
			x.order("web", "web", "edge", v1.PromotionAutomatic)
			ord := order(x.ns, "web")
			x.waitReason(ord, v1.ReasonRendered)
			var p v1.Preparation
			x.must(env.Client.Get(x.ctx, client.ObjectKey{Namespace: x.ns, Name: ord.Status.LatestPreparation}, &p))
			r := running{serving: "web", preparation: p.Name, revision: p.Spec.Artifact.Digest, apps: map[string]types.UID{}}
			waitFor(x.t, "the roll-out", time.Now().Add(setUpTimeout), func() error {
				apps := x.apps("web")
				if len(apps) != 1 {
					return fmt.Errorf("%d Applications", len(apps))
				}
				r.apps[apps[0].GetName()] = apps[0].GetUID()
				return nil
			})
			x.seesReason(serving(x.ns, "web"), v1.ReasonProgressing)
			x.broke()
			x.deleteProject()
			x.sees(serving(x.ns, "web"))
			x.alsoSees(environment(x.ns, "edge"))
			x.createProject()
			x.restored(r)
		},
	},
	{
		name: "environment-requires-cycle", kind: "Environment", input: "`spec.requires` of two Environments name each other",
		on: onEnv, reason: v1.ReasonRequirementCycle, mentions: []string{"spec.requires", "remove one of the requirements"}, keeps: keepsAll,
		also: map[string]string{onServing: v1.ReasonDeployed},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			x.create(&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "staging", Namespace: x.ns}, Spec: v1.EnvironmentSpec{
				ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": x.ns}}, Project: x.project,
				Requires: []v1.StageRequirement{{Environment: "edge"}},
			}})
			x.broke()
			x.editEnvironment(func(e *v1.Environment) { e.Spec.Requires = []v1.StageRequirement{{Environment: "staging"}} })
			x.sees(environment(x.ns, "edge"))
			x.seesReason(environment(x.ns, "staging"), v1.ReasonRequirementCycle)
			x.alsoSees(serving(x.ns, "web"))
			x.stillRuns(r)
		},
	},
	{
		name: "environment-soak-not-a-duration", kind: "Environment", input: "`soak: forever` in `spec.requires`",
		on: refusedAt, mentions: []string{"spec.requires[0].soak"}, keeps: nothingRan, late: true,
		run: func(x *check) {
			x.refused(x.createUnstructured("Environment", "edge", map[string]any{
				"clusterSelector": map[string]any{}, "project": x.project,
				"requires": []any{map[string]any{"environment": "staging", "soak": "forever"}},
			}))
		},
	},
	{
		name: "environment-requires-twice", kind: "Environment", input: "`spec.requires` names the same Environment twice",
		on: refusedAt, mentions: []string{"spec.requires[1]", "Duplicate value"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: x.ns}, Spec: v1.EnvironmentSpec{
				Project: x.project, Requires: []v1.StageRequirement{{Environment: "staging"}, {Environment: "staging"}},
			}}))
		},
	},
	{
		name: "environment-selector-not-an-object", kind: "Environment", input: "`spec.clusterSelector: tier=edge`, a string",
		on: refusedAt, mentions: []string{"spec.clusterSelector", "object"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createUnstructured("Environment", "edge", map[string]any{"clusterSelector": "tier=edge", "project": x.project}))
		},
	},

	// Cluster
	{
		name: "cluster-server-not-a-url", kind: "Cluster", input: "`spec.server: https://edge 1.example:6443`",
		on: refusedAt, mentions: []string{"spec.server"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: x.ns}, Spec: v1.ClusterSpec{
				Server: "https://edge 1.example:6443", CredentialsRef: v1.LocalObjectReference{Name: x.ns},
			}}))
		},
	},
	{
		name: "cluster-server-unresolvable", kind: "Cluster", input: "`spec.server` names a host that does not resolve",
		on: onCluster, reason: v1.ReasonUnreachable, mentions: []string{"edge-1.invalid", "spec.server"}, keeps: nothingRan,
		run: func(x *check) {
			x.putSecret(cfg.Namespace, x.ns, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken)})
			x.broke()
			x.clusterAt(x.ns, "https://edge-1.invalid:6443", nil)
			x.sees(clusterNamed(x.ns))
		},
	},
	{
		name: "cluster-server-500", kind: "Cluster", input: "the Cluster's server answers 500",
		on: onCluster, reason: v1.ReasonUnreachable, mentions: []string{"HTTP 500"}, keeps: nothingRan,
		run: func(x *check) {
			m := newMember()
			m.mode.Store(fail)
			x.putSecret(cfg.Namespace, x.ns, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken), cluster.KeyCA: m.CA()})
			x.broke()
			x.clusterAt(x.ns, m.URL(), nil)
			x.sees(clusterNamed(x.ns))
		},
	},
	{
		name: "cluster-server-hangs", kind: "Cluster", input: "the Cluster's server accepts connections and never answers",
		on: onCluster, reason: v1.ReasonUnreachable, mentions: []string{"is unreachable"}, keeps: nothingRan,
		run: func(x *check) {
			m := newMember()
			m.mode.Store(hang)
			x.putSecret(cfg.Namespace, x.ns, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken), cluster.KeyCA: m.CA()})
			x.broke()
			x.clusterAt(x.ns, m.URL(), nil)
			if msg := x.sees(clusterNamed(x.ns)).Message; !strings.Contains(msg, m.URL()) {
				x.t.Errorf("the message does not name the server %s: %s", m.URL(), msg)
			}
		},
	},
	{
		name: "cluster-stops-answering", kind: "Cluster", input: "one of two working Clusters' server stops answering",
		on: onCluster, reason: v1.ReasonUnreachable, mentions: []string{"is unreachable"}, keeps: keepsAll + "; the cluster is held ClusterNotReady",
		also: map[string]string{onServing: v1.ReasonDeployed},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns+"-a", x.ns+"-b")
			x.broke()
			memberOf(x.t, x.ns+"-a").mode.Store(hang)
			x.sees(clusterNamed(x.ns + "-a"))
			x.clusterHeld(r, x.ns+"-a", v1.ReasonClusterNotReady)
			x.alsoSees(serving(x.ns, "web"))
		},
	},
	{
		// A typo or a rename: the newer Cluster sorts first by name, so it is the one that
		// deploys there, with the server's only Argo CD cluster Secret; the older one steps back.
		name: "cluster-server-duplicate", kind: "Cluster",
		input: "a second Cluster names a working Cluster's `spec.server` (a trailing `/` is the same server) and sorts first by name",
		on:    onCluster, reason: v1.ReasonServerConflict, mentions: []string{"sorts first by name", "spec.server"},
		keeps: "what runs on the server, at the same revision, deployed by one Cluster: the first by name, which holds the server's only Argo CD cluster Secret; the other is held ClusterConflict, and its Application goes",
		also:  map[string]string{onServing: v1.ReasonDeploymentFailed},
		run: func(x *check) {
			first, older := x.ns+"-a", x.ns+"-b"
			r := x.working(v1.PromotionAutomatic, older)
			m := memberOf(x.t, older)
			x.putSecret(cfg.Namespace, first, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken), cluster.KeyCA: m.CA()})
			x.broke()
			x.clusterAt(first, m.URL()+"/", map[string]string{"tier": x.ns})
			if msg := x.sees(clusterNamed(older)).Message; !strings.Contains(msg, "Cluster "+first+" ") {
				x.t.Errorf("the message does not name the Cluster that keeps the server, %s: %s", first, msg)
			}
			x.seesReason(clusterNamed(first), v1.ReasonConnected)
			x.serverDeployedBy(r, first, older)
			x.alsoSees(serving(x.ns, "web"))
		},
	},
	{
		name: "cluster-label-unicode", kind: "Cluster", input: "a Cluster labelled `tier: край`",
		on: refusedAt, mentions: []string{"metadata.labels"}, keeps: nothingRan,
		run: func(x *check) {
			x.refused(x.createTyped(&v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: x.ns, Labels: map[string]string{"tier": "край"}},
				Spec: v1.ClusterSpec{Server: "https://edge-1.example:6443", CredentialsRef: v1.LocalObjectReference{Name: x.ns}}}))
		},
	},

	// The credentials Secret of a Cluster
	{
		name: "secret-kubeconfig-garbage", kind: "Secret", input: "`kubeconfig` holds random bytes",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{`"kubeconfig" does not parse`, "kubectl config view --raw"}, keeps: nothingRan,
		run: func(x *check) {
			x.credentialsCase(map[string][]byte{cluster.KeyKubeconfig: []byte("\x00\xff\xfe{{ not: [yaml")})
		},
	},
	{
		name: "secret-ca-garbage", kind: "Secret", input: "`ca.crt` holds a certificate block that does not parse",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{"ca.crt is not a PEM CA bundle", "put the server's CA certificate there"}, keeps: nothingRan,
		run: func(x *check) {
			x.credentialsCase(map[string][]byte{cluster.KeyToken: []byte(memberToken),
				cluster.KeyCA: []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")})
		},
	},
	{
		name: "secret-exec-plugin", kind: "Secret", input: "`kubeconfig` whose user runs an exec plugin",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{"exec plugin", "ServiceAccount token"}, keeps: nothingRan,
		run: func(x *check) {
			x.credentialsCase(map[string][]byte{cluster.KeyKubeconfig: []byte(kubeconfigWithExec)})
		},
	},
	{
		name: "secret-certificate-without-key", kind: "Secret", input: "`tls.crt` without `tls.key`",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{"tls.crt and tls.key come together"}, keeps: nothingRan,
		run: func(x *check) {
			x.credentialsCase(map[string][]byte{cluster.KeyClientCert: newMember().CA()})
		},
	},
	{
		name: "secret-token-control-characters", kind: "Secret", input: "`token` holds control characters",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{`"token"`}, keeps: nothingRan,
		run: func(x *check) {
			x.credentialsCase(map[string][]byte{cluster.KeyToken: []byte("eyJhb\x00GciOi\x7f\x1bJSUzI1NiJ9")})
		},
	},
	{
		name: "secret-garbage-after-ready", kind: "Secret", input: "a working Cluster's Secret is overwritten with garbage",
		on: onCluster, reason: v1.ReasonInvalidCredentials, mentions: []string{"spec.credentialsRef", "kubeconfig"},
		keeps: keepsAll + "; the Argo CD cluster Secret, unchanged; the cluster is held ClusterNotReady",
		also:  map[string]string{onServing: v1.ReasonDeploymentFailed},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			before := x.argoCDSecret(x.ns)
			x.broke()
			x.putSecret(cfg.Namespace, x.ns, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyKubeconfig: []byte("garbage")})
			x.sees(clusterNamed(x.ns))
			x.clusterHeld(r, x.ns, v1.ReasonClusterNotReady)
			x.alsoSees(serving(x.ns, "web"))
			if after := x.argoCDSecret(x.ns); after.ResourceVersion != before.ResourceVersion {
				x.t.Errorf("the Argo CD cluster Secret changed: Argo CD lost the credentials that worked")
			}
		},
	},
	{
		name: "secret-deleted-after-ready", kind: "Secret", input: "a working Cluster's Secret is deleted",
		on: onCluster, reason: v1.ReasonCredentialsNotFound, mentions: []string{"spec.credentialsRef", "create it"},
		keeps: keepsAll + "; the Argo CD cluster Secret, unchanged; the cluster is held ClusterNotReady",
		also:  map[string]string{onServing: v1.ReasonDeploymentFailed},
		run: func(x *check) {
			r := x.working(v1.PromotionAutomatic, x.ns)
			before := x.argoCDSecret(x.ns)
			x.broke()
			x.must(env.Client.Delete(x.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: x.ns, Namespace: cfg.Namespace}}))
			x.sees(clusterNamed(x.ns))
			x.clusterHeld(r, x.ns, v1.ReasonClusterNotReady)
			x.alsoSees(serving(x.ns, "web"))
			if after := x.argoCDSecret(x.ns); after.ResourceVersion != before.ResourceVersion {
				x.t.Errorf("the Argo CD cluster Secret changed: Argo CD lost the credentials that worked")
			}
		},
	},
}
