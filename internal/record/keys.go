package record

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretName is the Secret in Kokumi's namespace that holds the signing key, in the data key
// SecretKey.
const SecretName = "kokumi-signing-key"

// SecretKey is the data key of the Secret that holds the PEM private key.
const SecretKey = "private.pem"

// ConfigMapName is the ConfigMap in Kokumi's namespace that lists the trusted public keys:
// "cosign.pub" is the current key, "<keyid>.pub" each listed key (the current one and previous
// ones).
const ConfigMapName = "kokumi-public-keys"

// CurrentKeyEntry is the ConfigMap entry of the current public key, named as
// `cosign generate-key-pair` names its public key.
const CurrentKeyEntry = "cosign.pub"

// Keys manages the signing key and the trusted public keys through a controller-runtime client.
// Rotation: an admin deletes the Secret; the next Ensure makes a new key and lists it as
// cosign.pub, and the previous key's <keyid>.pub entry stays trusted until an admin removes it.
type Keys struct {
	// Client writes the Secret and the ConfigMap, and reads the ConfigMap in Trusted.
	Client client.Client
	// Reader reads the Secret and the ConfigMap in Ensure without a cache; nil means Client.
	Reader client.Reader
	// Namespace is Kokumi's namespace.
	Namespace string
}

func (k *Keys) reader() client.Reader {
	if k.Reader != nil {
		return k.Reader
	}
	return k.Client
}

// Ensure returns the signer, creating the Secret with a new key when it is absent, and makes
// the ConfigMap list its public key as cosign.pub and <keyid>.pub, keeping every other *.pub
// entry. The private key is never logged nor put in an error message.
func (k *Keys) Ensure(ctx context.Context) (*Signer, error) {
	signer, _, err := k.signer(ctx)
	if err != nil {
		return nil, err
	}
	if err := k.publish(ctx, signer); err != nil {
		return nil, err
	}
	return signer, nil
}

// Signer returns the signer, as Ensure does, but lists its public key only when it creates the
// key: a render's provenance leaves the ConfigMap as an admin left it (one who removed the
// current key stops trusting what it signed until the next deployment record lists it again).
func (k *Keys) Signer(ctx context.Context) (*Signer, error) {
	signer, created, err := k.signer(ctx)
	if err != nil {
		return nil, err
	}
	if created {
		if err := k.publish(ctx, signer); err != nil {
			return nil, err
		}
	}
	return signer, nil
}

// signer reads the key from the Secret, creating the Secret first when it is absent; created
// says it did.
func (k *Keys) signer(ctx context.Context) (_ *Signer, created bool, _ error) {
	key := types.NamespacedName{Namespace: k.Namespace, Name: SecretName}
	for attempt := 0; ; attempt++ {
		var secret corev1.Secret
		err := k.reader().Get(ctx, key, &secret)
		if err == nil {
			s, err := ParseSigner(secret.Data[SecretKey])
			if err != nil {
				return nil, false, fmt.Errorf("signing key in Secret %s/%s, entry %s: %w (delete the Secret to make a new key)", k.Namespace, SecretName, SecretKey, err)
			}
			return s, false, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("read Secret %s/%s: %w", k.Namespace, SecretName, err)
		}
		if attempt > 0 {
			return nil, false, fmt.Errorf("signing key Secret %s/%s was created by another writer and is gone again", k.Namespace, SecretName)
		}
		pemKey, err := GenerateKey()
		if err != nil {
			return nil, false, err
		}
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: k.Namespace, Name: SecretName,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "kokumi"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{SecretKey: pemKey},
		}
		err = k.Client.Create(ctx, &secret)
		if err == nil {
			s, err := ParseSigner(pemKey)
			return s, err == nil, err
		}
		if !apierrors.IsAlreadyExists(err) {
			// The error is the API server's: it never quotes the object's data.
			return nil, false, fmt.Errorf("create Secret %s/%s: %w", k.Namespace, SecretName, err)
		}
		// Another writer created it first: use theirs.
	}
}

// publish lists the signer's public key in the ConfigMap as cosign.pub and <keyid>.pub.
func (k *Keys) publish(ctx context.Context, s *Signer) error {
	pub := string(s.PublicKeyPEM())
	entry := s.KeyID() + ".pub"
	key := types.NamespacedName{Namespace: k.Namespace, Name: ConfigMapName}
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		var cm corev1.ConfigMap
		err := k.reader().Get(ctx, key, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: k.Namespace, Name: ConfigMapName,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "kokumi"},
				},
				Data: map[string]string{CurrentKeyEntry: pub, entry: pub},
			}
			return k.Client.Create(ctx, &cm)
		}
		if err != nil {
			return err
		}
		if cm.Data[CurrentKeyEntry] == pub && cm.Data[entry] == pub {
			return nil
		}
		// A previous key listed only as cosign.pub (say, by hand) keeps a <keyid>.pub entry,
		// so that its records stay trusted after the switch.
		if old := cm.Data[CurrentKeyEntry]; old != "" && old != pub {
			if prev, err := ParseTrustedKeys([]byte(old)); err == nil {
				for _, id := range prev.IDs() {
					if _, ok := cm.Data[id+".pub"]; !ok {
						if cm.Data == nil {
							cm.Data = map[string]string{}
						}
						cm.Data[id+".pub"] = old
					}
				}
			}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[CurrentKeyEntry] = pub
		cm.Data[entry] = pub
		return k.Client.Update(ctx, &cm)
	})
	if err != nil {
		return fmt.Errorf("list the public key in ConfigMap %s/%s: %w", k.Namespace, ConfigMapName, err)
	}
	return nil
}

// Trusted reads every *.pub entry of the ConfigMap. A missing ConfigMap trusts no key.
func (k *Keys) Trusted(ctx context.Context) (TrustedKeys, error) {
	var cm corev1.ConfigMap
	err := k.Client.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: ConfigMapName}, &cm)
	if apierrors.IsNotFound(err) {
		return TrustedKeys{}, nil
	}
	if err != nil {
		return TrustedKeys{}, fmt.Errorf("read ConfigMap %s/%s: %w", k.Namespace, ConfigMapName, err)
	}
	t := TrustedKeys{keys: map[string]*ecdsa.PublicKey{}}
	var errs []error
	for _, entry := range slices.Sorted(maps.Keys(cm.Data)) {
		if !strings.HasSuffix(entry, ".pub") {
			continue
		}
		one, err := ParseTrustedKeys([]byte(cm.Data[entry]))
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", entry, err))
			continue
		}
		maps.Copy(t.keys, one.keys)
	}
	if err := errors.Join(errs...); err != nil {
		return TrustedKeys{}, fmt.Errorf("trusted keys in ConfigMap %s/%s: %w", k.Namespace, ConfigMapName, err)
	}
	return t, nil
}
