package cluster

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// Keys of an Argo CD cluster Secret.
const (
	ArgoCDKeyName   = "name"
	ArgoCDKeyServer = "server"
	ArgoCDKeyConfig = "config"
)

// Finalizer keeps a Cluster until its Argo CD cluster Secret can go: after every Argo CD
// Application for it is gone.
const Finalizer = "delivery.kokumi.dev/argocd-cluster-secret"

// secretPrefix starts the name of every Argo CD cluster Secret Kokumi keeps.
const secretPrefix = "kokumi-cluster-"

// SecretName is the name of the Argo CD cluster Secret of the Cluster clusterName: stable,
// unique, at most 253 characters.
func SecretName(clusterName string) string {
	const maxLen = 253
	if len(secretPrefix)+len(clusterName) <= maxLen {
		return secretPrefix + clusterName
	}
	sum := sha256.Sum256([]byte(clusterName))
	suffix := "-" + hex.EncodeToString(sum[:])[:16]
	return (secretPrefix + clusterName)[:maxLen-len(suffix)] + suffix
}

// SecretLabels are the labels of the Argo CD cluster Secret of the Cluster clusterName.
func SecretLabels(clusterName string) map[string]string {
	return map[string]string{
		argocd.LabelSecretType: argocd.SecretTypeCluster,
		argocd.LabelManagedBy:  argocd.ManagedByKokumi,
		argocd.LabelCluster:    clusterName,
	}
}

// ArgoCDSecret is the Argo CD cluster Secret that declares the Cluster clusterName at server
// with the credentials, in Argo CD's namespace.
func ArgoCDSecret(namespace, clusterName, server string, c Credentials) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SecretName(clusterName),
			Namespace: namespace,
			Labels:    SecretLabels(clusterName),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			ArgoCDKeyName:   []byte(clusterName),
			ArgoCDKeyServer: []byte(server),
			ArgoCDKeyConfig: c.ArgoCDConfig(),
		},
	}
}
