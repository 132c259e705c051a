package changes

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	// secretA is a Secret of the target namespace as one Preparation renders it.
	secretA = `apiVersion: v1
kind: Secret
metadata:
  name: db
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"data":{"password":"b2xk"}}'
    team: shop
data:
  password: b2xk
  user: YWRtaW4=
stringData:
  token: old-token
`
	// secretB is the same Secret as the next Preparation renders it: the password and the
	// token are rotated, the user is not.
	secretB = `apiVersion: v1
kind: Secret
metadata:
  name: db
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"data":{"password":"bmV3"}}'
    team: shop
data:
  password: bmV3
  user: YWRtaW4=
stringData:
  token: new-token
`
	elsewhere = "apiVersion: v1\nkind: Secret\nmetadata: {name: tls, namespace: certs}\ndata: {tls.key: a2V5}\n"
	configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"
)

func objects(t *testing.T, manifests ...string) []Object {
	t.Helper()
	objs, err := Objects("p", []byte(strings.Join(manifests, "---\n")))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestRedactSecretsMasksTheValuesWhereThePersonMayNotGetSecrets(t *testing.T) {
	a := objects(t, configMap, secretA, elsewhere)
	before := a[1].YAML
	var asked []string
	mayRead := func(ns string) (bool, error) {
		asked = append(asked, ns)
		return ns == "certs", nil
	}
	out, redacted, err := RedactSecrets(mayRead, Side{Objects: a, Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(redacted) != "[Secret/shop/db]" || fmt.Sprint(asked) != "[shop certs]" {
		t.Errorf("redacted %v after asking about %v, want the Secret of the target namespace, each namespace asked once", redacted, asked)
	}
	if a[1].YAML != before {
		t.Error("RedactSecrets changed the objects it was given")
	}
	want := `apiVersion: v1
data:
  password: ++++++++
  user: ++++++++
kind: Secret
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: ++++++++
    team: shop
  name: db
stringData:
  token: ++++++++
`
	if out[0][1].YAML != want {
		t.Errorf("the Secret:\n%s\nwant:\n%s", out[0][1].YAML, want)
	}
	if out[0][0].YAML != a[0].YAML || out[0][2].YAML != a[2].YAML || !strings.Contains(out[0][2].YAML, "tls.key: a2V5") {
		t.Errorf("the ConfigMap and the Secret of a namespace the person may read changed:\n%s\n%s", out[0][0].YAML, out[0][2].YAML)
	}
	if note := RedactedNote(redacted); note != "values of 1 Secret hidden: you may not get secrets in namespace shop" {
		t.Errorf("note %q", note)
	}

	// Whoever may read everything sees everything.
	out, redacted, err = RedactSecrets(func(string) (bool, error) { return true, nil }, Side{Objects: a, Namespace: "shop"})
	if err != nil || len(redacted) != 0 || redacted == nil || out[0][1].YAML != before || RedactedNote(redacted) != "" {
		t.Errorf("a reader of Secrets: %v %v\n%s", err, redacted, out[0][1].YAML)
	}
	// RBAC that cannot be asked shows nothing.
	if _, _, err := RedactSecrets(func(string) (bool, error) { return false, errors.New("down") }, Side{Objects: a, Namespace: "shop"}); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("err %v", err)
	}
}

func TestRedactedDiffsShowThatAValueChangedNotWhatItIs(t *testing.T) {
	a, b := objects(t, secretA, configMap), objects(t, secretB, configMap)
	// The Secret goes to shop from a and to prod from b: prod hides it on both sides.
	out, redacted, err := RedactSecrets(func(ns string) (bool, error) { return ns == "shop", nil },
		Side{Objects: a, Namespace: "shop"}, Side{Objects: b, Namespace: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(redacted) != "[Secret/prod/db Secret/shop/db]" || RedactedNote(redacted) != "values of 2 Secrets hidden: you may not get secrets in namespaces prod, shop" {
		t.Errorf("redacted %v: %q", redacted, RedactedNote(redacted))
	}
	diff, unchanged, err := DiffObjects("a", "b", out[0], out[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(diff) != 1 || unchanged != 1 {
		t.Fatalf("%d changes, %d unchanged, want the Secret changed", len(diff), unchanged)
	}
	text := diff[0].Diff
	for _, secret := range []string{"b2xk", "bmV3", "old-token", "new-token", "YWRtaW4="} {
		if strings.Contains(text, secret) {
			t.Errorf("the diff shows %q:\n%s", secret, text)
		}
	}
	for _, line := range []string{
		"-  password: ++++++++\n+  password: +++++++++\n",
		"   user: ++++++++\n",
		"-    kubectl.kubernetes.io/last-applied-configuration: ++++++++\n+    kubectl.kubernetes.io/last-applied-configuration: +++++++++\n",
		"-  token: ++++++++\n+  token: +++++++++\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("the diff lacks %q:\n%s", line, text)
		}
	}

	// The same Secret on both sides is no change.
	out, _, err = RedactSecrets(func(string) (bool, error) { return false, nil }, Side{Objects: a, Namespace: "shop"}, Side{Objects: objects(t, secretA), Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if diff, _, _ := DiffObjects("a", "b", out[0], out[1]); len(diff) != 1 || diff[0].Change != Removed || diff[0].Kind != "ConfigMap" {
		t.Errorf("an unchanged Secret: %+v", diff)
	}
}
