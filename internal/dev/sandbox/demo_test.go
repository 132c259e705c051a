package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// The demo's chart and image land in a real registry on loopback (with authentication on, as
// the fleet runs it: the pusher pushes, the puller only reads), the chart renders with the
// image pointed at that registry, and pushing again gives the same digests, so that a restarted
// demo renders no new Preparation.
func TestPushDemoPushesARenderableChartAndItsImageDeterministically(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartWithCredentials(t, creds)
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	chartDir := Assets{Root: root}.DemoChartDir()

	if _, err := PushDemo(ctx, reg.Addr, creds.Puller, chartDir); err == nil {
		t.Fatal("the puller pushed the demo")
	}
	first, err := PushDemo(ctx, reg.Addr, creds.Pusher, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := PushDemo(ctx, reg.Addr, creds.Pusher, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if *first != *again {
		t.Errorf("pushing the demo twice gave %+v, then %+v", first, again)
	}
	if want := "oci://" + reg.Addr + "/" + DemoChartRepository; first.ChartURL != want || first.ChartVersion != "6.14.1" {
		t.Errorf("chart = %s:%s, want %s:6.14.1", first.ChartURL, first.ChartVersion, want)
	}

	client := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Puller}}
	pulled, err := client.Pull(ctx, first.ChartURL, first.ChartVersion)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Digest != first.ChartDigest {
		t.Errorf("the tag resolves to %s, PushDemo said %s", pulled.Digest, first.ChartDigest)
	}
	res, err := render.Render(ctx, pulled.Layers, render.Options{ReleaseName: "podinfo-edge", TargetNamespace: "podinfo", RequireChart: true})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range res.Objects {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 || containers[0].(map[string]any)["image"] != first.Image {
			t.Errorf("the Deployment's containers are %v, want the image %s", containers, first.Image)
		}
	}
	if got := strings.Join(kinds, ","); got != "Service/podinfo-edge,Deployment/podinfo-edge" && got != "Deployment/podinfo-edge,Service/podinfo-edge" {
		t.Errorf("rendered %s, want the Deployment and the Service podinfo-edge", got)
	}

	pulledImage, err := client.Pull(ctx, strings.TrimSuffix(first.Image, ":6.14.1"), "6.14.1")
	if err != nil {
		t.Fatal(err)
	}
	if pulledImage.Digest != first.ImageDigest || len(pulledImage.Layers) != 1 {
		t.Errorf("the image resolves to %s with %d layers, want %s with one", pulledImage.Digest, len(pulledImage.Layers), first.ImageDigest)
	}
}
