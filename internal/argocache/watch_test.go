package argocache

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/test/harness"
	"github.com/kokumi-dev/kokumi/test/memory"
)

// stock is the decoder controller-runtime's cache uses for a typed kind, and the one
// applicationDecoder must agree with.
func stock(t testing.TB) (*runtime.Scheme, runtime.NegotiatedSerializer) {
	t.Helper()
	scheme, err := kscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return scheme, serializer.NewCodecFactory(scheme).WithoutConversion()
}

// decoders are the stock decoder of JSON and applicationSerializer's, both as a rest client asks
// for them.
func decoders(t testing.TB) (stockDecoder, fastDecoder runtime.Decoder, stockEvents, fastEvents runtime.Serializer) {
	t.Helper()
	_, codecs := stock(t)
	fast := applicationSerializer{codecs}
	stockNeg := runtime.NewClientNegotiator(codecs, argocd.ApplicationGVK.GroupVersion())
	fastNeg := runtime.NewClientNegotiator(fast, argocd.ApplicationGVK.GroupVersion())
	sd, se, _, err := stockNeg.StreamDecoder(runtime.ContentTypeJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	fd, fe, _, err := fastNeg.StreamDecoder(runtime.ContentTypeJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sd, fd, se, fe
}

// realisticJSON is an Application as Argo CD writes it (20 KB and more), with kubectl's
// last-applied annotation, encoded as the API server encodes a custom resource: keys in order.
func realisticJSON(t testing.TB) []byte {
	t.Helper()
	whole := memory.RealisticApplication("argocd", "team-a", "podinfo", "edge-042", 7)
	whole.SetAnnotations(map[string]string{argocd.AnnotationOwner: "team-a/podinfo", argocd.LastAppliedAnnotation: `{"big":"yes"}`})
	whole.SetResourceVersion("42")
	whole.SetUID(types.UID("5f0c3e1e-2f54-4b43-9d6a-1c1f7a4c1a11"))
	data, err := json.Marshal(whole.Object)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestApplicationDecoderAgreesWithTheScheme decodes the same JSON by the scheme's serializer and by
// applicationDecoder: the same Application, for what the short way takes, and what it hands on.
func TestApplicationDecoderAgreesWithTheScheme(t *testing.T) {
	stockDec, fastDec, stockEvents, fastEvents := decoders(t)
	data := realisticJSON(t)
	reordered := strings.Replace(string(data), `"apiVersion":"argoproj.io/v1alpha1","kind":"Application",`, `"kind":"Application","apiVersion":"argoproj.io/v1alpha1",`, 1)
	status, err := json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410, Message: "too old resource version"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		into func() runtime.Object
		fast bool
	}{
		{"an Application of a watch event", data, func() runtime.Object { return nil }, true},
		{"an Application into an Application", data, func() runtime.Object { return &argocd.Application{Spec: argocd.ApplicationFields{Project: `"stale"`}} }, true},
		{"an Application with its kind first", []byte(reordered), func() runtime.Object { return nil }, false},
		{"the Status of an ERROR event", status, func() runtime.Object { return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _, err := stockDec.Decode(tc.data, nil, tc.into())
			if err != nil {
				t.Fatal(err)
			}
			before := decodes.fast.Load()
			got, _, err := fastDec.Decode(tc.data, nil, tc.into())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(want, got) {
				t.Errorf("decoders differ:\n scheme %#v\n short  %#v", want, got)
			}
			if took := decodes.fast.Load() > before; took != tc.fast {
				t.Errorf("took the short way: %v, want %v", took, tc.fast)
			}
		})
	}
	if app, _, _ := fastDec.Decode(data, nil, nil); app.(*argocd.Application).Annotations[argocd.LastAppliedAnnotation] != "" {
		t.Error("the short way kept kubectl's last-applied annotation")
	}
	if _, _, err := fastDec.Decode(append(data[:len(data)-1:len(data)-1], ','), nil, nil); err == nil {
		t.Error("the short way accepted broken JSON")
	}

	// The envelope of a watch event.
	event := []byte(`{"type":"MODIFIED","object":` + string(data) + `}`)
	var want, got metav1.WatchEvent
	if _, _, err := stockEvents.Decode(event, nil, &want); err != nil {
		t.Fatal(err)
	}
	res, _, err := fastEvents.Decode(event, nil, &got)
	if err != nil {
		t.Fatal(err)
	}
	if res != &got || !reflect.DeepEqual(want, got) {
		t.Errorf("watch events differ:\n scheme %s %d bytes\n short  %s %d bytes", want.Type, len(want.Object.Raw), got.Type, len(got.Object.Raw))
	}
	if _, _, err := fastEvents.Decode([]byte(`{"type":"ADDED","object":`), nil, &got); err == nil {
		t.Error("the short way accepted a broken watch event")
	}
}

// BenchmarkApplicationWatchEvent decodes one watch event of a 20 KB Application as the cache did
// (the scheme's serializer) and as it does (applicationSerializer).
func BenchmarkApplicationWatchEvent(b *testing.B) {
	stockDec, fastDec, stockEvents, fastEvents := decoders(b)
	event := []byte(`{"type":"MODIFIED","object":` + string(realisticJSON(b)) + `}`)
	for _, bc := range []struct {
		name   string
		events runtime.Serializer
		dec    runtime.Decoder
	}{{"scheme", stockEvents, stockDec}, {"short", fastEvents, fastDec}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(event)))
			b.ReportAllocs()
			for b.Loop() {
				var ev metav1.WatchEvent
				if _, _, err := bc.events.Decode(event, nil, &ev); err != nil {
					b.Fatal(err)
				}
				if _, _, err := bc.dec.Decode(ev.Object.Raw, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCacheWatchesApplicationsTheShortWay runs the cache Kokumi builds (New) against a real API
// server: the Applications it holds, through a create, an update and a delete, are what the
// scheme's decoder reads of them, every one of them came the short way, and the selector holds
// (an Application that is not Kokumi's, or another shard's, is not cached).
func TestCacheWatchesApplicationsTheShortWay(t *testing.T) {
	harness.QuietLogs()
	env, err := harness.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "argocd"
	harness.Must(t, env.CreateNamespace(ctx, ns))

	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	harness.Must(t, err)
	argo, err := New(mgr, config.Config{ArgoCDNamespace: ns, Shard: shard.Main})
	harness.Must(t, err)
	go func() { _ = mgr.Start(ctx) }()

	fallbacks := decodes.fallback.Load()
	ours, err := env.CreateApplication(ctx, ns, "team-a", "podinfo", "edge-1", harness.AppStatus{Sync: argocd.SyncSynced, Revision: "sha256:1", Health: argocd.HealthHealthy, Since: time.Now()})
	harness.Must(t, err)
	others := map[string]string{"theirs": "", "shard-b": argocd.ManagedByKokumi}
	for name, managedBy := range others {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"project": "default",
			"source":      map[string]any{"repoURL": "oci://127.0.0.1:5000/x", "path": "."},
			"destination": map[string]any{"server": "https://x.example:6443", "namespace": "x"}}}}
		u.SetGroupVersionKind(argocd.ApplicationGVK)
		u.SetNamespace(ns)
		u.SetName(name)
		if managedBy != "" {
			u.SetLabels(map[string]string{argocd.LabelManagedBy: managedBy, shard.Label: "b"})
		}
		harness.Must(t, env.Client.Create(ctx, u))
	}

	// cached is the Application the cache holds under name, and what the scheme's decoder reads
	// of it from the API server.
	cached := func(name string) (got, want *argocd.Application, err error) {
		got, want = &argocd.Application{}, &argocd.Application{}
		key := client.ObjectKey{Namespace: ns, Name: name}
		if err := mgr.GetAPIReader().Get(ctx, key, want); err != nil {
			return nil, nil, err
		}
		return got, want, argo.Client.Get(ctx, key, got)
	}
	same := func(name string) func() error {
		return func() error {
			got, want, err := cached(name)
			if err != nil {
				return err
			}
			got.TypeMeta = want.TypeMeta // the cache's reader sets the kind, the API reader does not
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("cached %s differs:\n cached %+v\n read   %+v", name, got, want)
			}
			return nil
		}
	}
	harness.Eventually(t, "the cache holds the Application as the API server has it", 30*time.Second, same(ours))

	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	harness.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ours}, app))
	harness.Must(t, unstructured.SetNestedField(app.Object, "sha256:2", "spec", "source", "targetRevision"))
	harness.Must(t, unstructured.SetNestedField(app.Object, argocd.SyncOutOfSync, "status", "sync", "status"))
	harness.Must(t, env.Client.Update(ctx, app))
	harness.Eventually(t, "the cache holds the changed Application", 30*time.Second, func() error {
		got, _, err := cached(ours)
		if err != nil {
			return err
		}
		if got.Status.Sync.Status != argocd.SyncOutOfSync {
			return fmt.Errorf("cached sync status %q, want %q", got.Status.Sync.Status, argocd.SyncOutOfSync)
		}
		return same(ours)()
	})

	list := &argocd.ApplicationList{}
	harness.Must(t, argo.Client.List(ctx, list))
	if len(list.Items) != 1 || list.Items[0].Name != ours {
		t.Errorf("cache holds %d Applications, want only Kokumi's %s of the main shard", len(list.Items), ours)
	}

	harness.Must(t, env.Client.Delete(ctx, app))
	harness.Eventually(t, "the cache drops the deleted Application", 30*time.Second, func() error {
		err := argo.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ours}, &argocd.Application{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleted Application still cached (%v)", err)
		}
		return nil
	})
	// The list at start may decode through the scheme; every Application of a watch event came
	// the short way.
	if n := decodes.fallback.Load() - fallbacks; n != 0 {
		t.Errorf("%d Applications decoded the long way, want 0", n)
	}
	if decodes.fast.Load() == 0 {
		t.Error("no Application decoded the short way")
	}
}
