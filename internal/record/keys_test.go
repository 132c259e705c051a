package record_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

const kokumiNS = "kokumi-system"

func newFakeClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
}

func publicKeys(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: kokumiNS, Name: record.ConfigMapName}, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

func TestKeysEnsureCreatesListsAndRotates(t *testing.T) {
	ctx := context.Background()
	admin := recordtest.NewSigner(t)
	c := newFakeClient(t, interceptor.Funcs{}, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: kokumiNS, Name: record.ConfigMapName},
		Data:       map[string]string{"release-team.pub": string(admin.PublicKeyPEM()), "README": "not a key"},
	})
	k := &record.Keys{Client: c, Namespace: kokumiNS}

	first, err := k.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: kokumiNS, Name: record.SecretName}, &secret); err != nil {
		t.Fatalf("the Secret was not created: %v", err)
	}
	if !strings.Contains(string(secret.Data["private.pem"]), "BEGIN PRIVATE KEY") {
		t.Error("the Secret holds no private.pem")
	}
	data := publicKeys(t, c)
	if data["cosign.pub"] != string(first.PublicKeyPEM()) || data[first.KeyID()+".pub"] != string(first.PublicKeyPEM()) {
		t.Errorf("ConfigMap = %v, want the key as cosign.pub and %s.pub", data, first.KeyID())
	}
	if data["release-team.pub"] == "" || data["README"] != "not a key" {
		t.Errorf("ConfigMap = %v, other entries were dropped", data)
	}

	again, err := k.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.KeyID() != first.KeyID() {
		t.Errorf("a second Ensure made key %s, want %s", again.KeyID(), first.KeyID())
	}

	// Rotation: the admin deletes the Secret.
	if err := c.Delete(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	second, err := k.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.KeyID() == first.KeyID() {
		t.Fatal("deleting the Secret did not make a new key")
	}
	data = publicKeys(t, c)
	if data["cosign.pub"] != string(second.PublicKeyPEM()) || data[second.KeyID()+".pub"] == "" || data[first.KeyID()+".pub"] == "" {
		t.Errorf("after rotation ConfigMap has %v", slices.Sorted(maps.Keys(data)))
	}
	trusted, err := k.Trusted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{first.KeyID(), second.KeyID(), admin.KeyID()}
	slices.Sort(want)
	if !slices.Equal(trusted.IDs(), want) {
		t.Errorf("Trusted = %v, want %v", trusted.IDs(), want)
	}
}

func TestKeysEnsureCreatesTheConfigMapAndUsesAConcurrentlyCreatedSecret(t *testing.T) {
	ctx := context.Background()
	theirPEM, err := record.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := record.ParseSigner(theirPEM)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	c := newFakeClient(t, interceptor.Funcs{
		// The first read misses the Secret; by the time of the create another replica made it.
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				reads++
				if reads == 1 {
					return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kokumiNS, Name: record.SecretName},
		Data:       map[string][]byte{"private.pem": theirPEM},
	})
	k := &record.Keys{Client: c, Namespace: kokumiNS}
	got, err := k.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyID() != theirs.KeyID() {
		t.Errorf("Ensure used key %s, want the concurrently created %s", got.KeyID(), theirs.KeyID())
	}
	if data := publicKeys(t, c); data["cosign.pub"] != string(theirs.PublicKeyPEM()) || len(data) != 2 {
		t.Errorf("ConfigMap = %v", data)
	}
}

func TestKeysTrustedWithoutConfigMapAndBadSecret(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t, interceptor.Funcs{}, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kokumiNS, Name: record.SecretName},
		Data:       map[string][]byte{"private.pem": []byte("-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ5dGVz\n-----END PRIVATE KEY-----\n")},
	})
	k := &record.Keys{Client: c, Reader: c, Namespace: kokumiNS}
	trusted, err := k.Trusted(ctx)
	if err != nil || len(trusted.IDs()) != 0 {
		t.Errorf("Trusted without a ConfigMap = %v, %v; want no keys and no error", trusted.IDs(), err)
	}
	_, err = k.Ensure(ctx)
	if err == nil {
		t.Fatal("a broken key in the Secret was used")
	}
	if strings.Contains(err.Error(), "c2VjcmV0LWJ5dGVz") {
		t.Errorf("the error quotes the key: %v", err)
	}
}
