package render_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	kmanifests "github.com/kokumi-dev/kokumi/internal/manifests"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// valuesChart's defaults are merged with the user's values; its one template writes the
// values the chart sees as JSON into a ConfigMap.
const valuesChartDefaults = `replicaCount: 2
image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.14.1
  pullPolicy: IfNotPresent
ui:
  message: hello
  colors: [red, green]
resources: {}
hpa:
  enabled: true
  maxReplicas: 4
nested:
  a:
    b:
      c: deep
`

// mergedValues is what the chart should see: the user's values over the defaults. Maps merge
// key by key; any other user value (a scalar, a list, a map over a scalar) replaces the
// default whole; a user null removes the default, and stays null where there is no default.
func mergedValues(defaults, user map[string]any) map[string]any {
	out := make(map[string]any, len(defaults)+len(user))
	for k, v := range defaults {
		out[k] = v
	}
	for k, uv := range user {
		dv, has := defaults[k]
		um, userMap := uv.(map[string]any)
		dm, defaultMap := dv.(map[string]any)
		switch {
		case uv == nil && has:
			delete(out, k)
		case userMap && defaultMap:
			out[k] = mergedValues(dm, um)
		default:
			out[k] = uv
		}
	}
	return out
}

// renderedValues reads the values the chart saw back from its render.
func renderedValues(t *testing.T, manifests []byte) map[string]any {
	t.Helper()
	objs, err := kmanifests.Parse(manifests)
	if err != nil || len(objs) != 1 {
		t.Fatalf("the render is not one ConfigMap (%v):\n%s", err, manifests)
	}
	raw, _, _ := unstructured.NestedString(objs[0].Object, "data", "values.json")
	var got map[string]any
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("the values the chart saw do not parse (%v): %q", err, raw)
	}
	return got
}

// A Product's values (JSON, as the API server stores spec.render.helm.values) are merged over
// the chart's defaults: every value the user set is what the chart sees, every default the
// user left alone is kept, a null removes a default; rendering twice gives the same bytes (the
// config hash depends on it) and leaves the user's values as they were.
func FuzzHelmValues(f *testing.F) {
	chart := ocitest.Chart(f, "values", map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: values\nversion: 1.0.0\n",
		"values.yaml": valuesChartDefaults,
		"templates/values.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: values\ndata:\n" +
			"  values.json: {{ toJson .Values | quote }}\n",
	})
	var defaults map[string]any
	if err := yaml.Unmarshal([]byte(valuesChartDefaults), &defaults); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{}`,
		`{"replicaCount": 3}`,
		`{"image": {"tag": "6.15.0"}, "ui": {"message": "héllo, 世界 🎉"}}`,
		`{"image": null, "hpa": {"enabled": false, "maxReplicas": null}}`,
		`{"ui": {"colors": []}, "resources": {"limits": {"cpu": "100m"}}}`,
		`{"image": "not a table", "replicaCount": {"a": 1}}`,
		`{"nested": {"a": {"b": {"c": null, "d": [1, 2.5, true, null]}}}, "new": {"x": null}}`,
		`{"ui": {"message": "line\none\u0000\ttab \"quoted\" ---\n--- {{ .Values }}"}}`,
		`{"replicaCount": 1e21, "big": 12345678901234567890, "neg": -0.0}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		var user map[string]any
		if err := json.Unmarshal(raw, &user); err != nil || user == nil {
			return // the API server refuses values that are not a JSON object
		}
		var pristine map[string]any
		_ = json.Unmarshal(raw, &pristine)
		opts := render.HelmOptions{ReleaseName: "fuzz", Namespace: "fuzz", Values: user}
		out, err := render.Helm(context.Background(), chart, opts)
		if err != nil {
			t.Fatalf("values %s do not render: %v", raw, err)
		}
		if !reflect.DeepEqual(user, pristine) {
			t.Fatalf("rendering changed the user's values:\n%v\nwas\n%v", user, pristine)
		}
		again, err := render.Helm(context.Background(), chart, opts)
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("rendering twice differs (%v):\n%s\n---\n%s", err, out, again)
		}
		got := renderedValues(t, out)
		want := mergedValues(defaults, user)
		// Compare as JSON sees them, the way the chart's toJson wrote them.
		wantJSON, _ := json.Marshal(want)
		var normalized map[string]any
		if err := json.Unmarshal(wantJSON, &normalized); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, normalized) {
			gotJSON, _ := json.Marshal(got)
			t.Fatalf("values %s: the chart saw\n%s\nwant the user's values over the defaults:\n%s", raw, gotJSON, wantJSON)
		}
	})
}
