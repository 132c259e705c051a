package argocache

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	sigsjson "sigs.k8s.io/json"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// applicationPrefix is how the API server begins the JSON of every Application it sends: a
// custom resource's keys come in the order of their names, so apiVersion and kind lead. JSON
// that begins so is an Application of Argo CD's version, with no other kind key after it.
var applicationPrefix = []byte(`{"apiVersion":"` + argocd.ApplicationGVK.GroupVersion().String() + `","kind":"` + argocd.ApplicationGVK.Kind + `",`)

// decodes counts the objects of Applications' lists and watches decoded by the short way (fast)
// and, though they might have been Applications, by the scheme's serializer (fallback): for the
// tests that show the short way is the one taken.
var decodes struct{ fast, fallback atomic.Int64 }

// applicationDecoder decodes the Application of a watch event straight into
// argocd.Application (argocd.Application.UnmarshalJSON), as the scheme's serializer would, less
// its two extra passes over the JSON: the first finds the kind (SimpleMetaFactory.Interpret),
// the second only skips the object to hand it to UnmarshalJSON. Anything else (a Status in an
// ERROR event, a list, JSON in another key order) goes to the scheme's serializer, fallback.
type applicationDecoder struct{ fallback runtime.Decoder }

// Decode decodes data into into, or into a new object when into is nil.
func (d applicationDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	app, ok := into.(*argocd.Application)
	if !ok && into != nil {
		return d.fallback.Decode(data, defaults, into)
	}
	if !bytes.HasPrefix(data, applicationPrefix) {
		decodes.fallback.Add(1)
		return d.fallback.Decode(data, defaults, into)
	}
	if app == nil {
		app = &argocd.Application{}
	} else {
		*app = argocd.Application{}
	}
	if err := app.UnmarshalJSON(data); err != nil {
		return nil, nil, err
	}
	// As the scheme's serializer leaves a typed object decoded without conversion.
	app.TypeMeta = metav1.TypeMeta{}
	decodes.fast.Add(1)
	gvk := argocd.ApplicationGVK
	return app, &gvk, nil
}

// watchEventSerializer decodes the envelope of a watch event ({"type": …, "object": …}) straight
// into metav1.WatchEvent, without the serializer's first pass that looks for a kind the
// envelope does not have; it encodes, and decodes anything else, as Serializer does.
type watchEventSerializer struct{ runtime.Serializer }

// Decode decodes data into into when it is a metav1.WatchEvent, and hands anything else on.
func (s watchEventSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return s.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, ev); err != nil {
		return nil, nil, fmt.Errorf("decode a watch event: %w", err)
	}
	gvk := metav1.SchemeGroupVersion.WithKind("WatchEvent")
	return ev, &gvk, nil
}

// applicationSerializer is the scheme's JSON codecs, without conversion, but that the objects of
// Applications' lists and watches decode by applicationDecoder and the watch events' envelopes by
// watchEventSerializer.
type applicationSerializer struct{ runtime.NegotiatedSerializer }

// SupportedMediaTypes are the codecs', with JSON's stream serializer decoding watch events
// straight.
func (s applicationSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := s.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, len(infos))
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeJSON && info.StreamSerializer != nil {
			stream := *info.StreamSerializer
			stream.Serializer = watchEventSerializer{stream.Serializer}
			info.StreamSerializer = &stream
		}
		out[i] = info
	}
	return out
}

// DecoderToVersion decodes Applications by applicationDecoder, anything else as the codecs do.
func (s applicationSerializer) DecoderToVersion(d runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return applicationDecoder{fallback: s.NegotiatedSerializer.DecoderToVersion(d, gv)}
}

// applicationsListWatch lists and watches the Applications of namespace that selector selects,
// through cfg and httpClient (the manager's identity and transport), decoding each by
// applicationSerializer. Watch bookmarks are asked for, as controller-runtime's informers ask.
func applicationsListWatch(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, namespace string, selector labels.Selector) (*toolscache.ListWatch, error) {
	rc, err := applicationsClient(cfg, httpClient, applicationSerializer{serializer.NewCodecFactory(scheme).WithoutConversion()})
	if err != nil {
		return nil, fmt.Errorf("create the watch of Argo CD Applications: %w", err)
	}
	params := runtime.NewParameterCodec(scheme)
	labelSelector := selector.String()
	request := func(opts metav1.ListOptions) *rest.Request {
		opts.LabelSelector = labelSelector
		return rc.Get().Namespace(namespace).Resource(applications).VersionedParams(&opts, params)
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &argocd.ApplicationList{}
			if err := request(opts).Do(ctx).Into(list); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch, opts.AllowWatchBookmarks = true, true
			return request(opts).Watch(ctx)
		},
	}, nil
}

// newInformer is the cache's informer constructor: Applications are listed and watched by apps
// (applicationsListWatch), every other kind by what the cache passes.
func newInformer(apps toolscache.ListerWatcher) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if _, ok := obj.(*argocd.Application); ok {
			lw = apps
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
}
