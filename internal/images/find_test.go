package images

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func objects(t *testing.T, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

func TestFindSeesEveryContainerOfEveryWorkloadKind(t *testing.T) {
	objs := objects(t,
		"kind: Pod\napiVersion: v1\nspec:\n  initContainers: [{name: i, image: 'init:1'}]\n  containers: [{name: c, image: 'pod:1'}]\n  ephemeralContainers: [{name: e, image: 'debug:1'}]\n",
		"kind: Deployment\napiVersion: apps/v1\nspec: {template: {spec: {containers: [{name: c, image: 'deploy:1'}]}}}\n",
		"kind: StatefulSet\napiVersion: apps/v1\nspec: {template: {spec: {containers: [{name: c, image: 'sts:1'}]}}}\n",
		"kind: DaemonSet\napiVersion: apps/v1\nspec: {template: {spec: {initContainers: [{name: c, image: 'ds-init:1'}], containers: [{name: c, image: 'ds:1'}]}}}\n",
		"kind: Job\napiVersion: batch/v1\nspec: {template: {spec: {containers: [{name: c, image: 'job:1'}]}}}\n",
		"kind: CronJob\napiVersion: batch/v1\nspec: {jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: 'cron:1'}]}}}}}\n",
		"kind: ReplicaSet\napiVersion: apps/v1\nspec: {template: {spec: {containers: [{name: c, image: 'deploy:1'}]}}}\n",
		"kind: ConfigMap\napiVersion: v1\ndata: {image: 'not-an-image:1'}\n",
		"kind: Widget\napiVersion: example.com/v1\nspec: {template: {spec: {containers: [{name: c, image: 'custom:1'}]}}}\n",
	)
	got := Find(objs)
	want := []string{"cron:1", "debug:1", "deploy:1", "ds-init:1", "ds:1", "init:1", "job:1", "pod:1", "sts:1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Find = %v, want %v", got, want)
	}
	Rewrite(objs, map[string]string{"cron:1": "cron@sha256:1", "debug:1": "debug@sha256:2"})
	after := Find(objs)
	if after[0] != "cron@sha256:1" || after[1] != "debug@sha256:2" {
		t.Errorf("after Rewrite, Find = %v", after)
	}
}

func TestWithoutTagKeepsTheRepositoryAsWritten(t *testing.T) {
	for in, want := range map[string]string{
		"nginx:1.25":                      "nginx",
		"nginx":                           "nginx",
		"127.0.0.1:5000/a/b:v1":           "127.0.0.1:5000/a/b",
		"127.0.0.1:5000/a/b":              "127.0.0.1:5000/a/b",
		"ghcr.io/x/y:1@sha256:abc":        "ghcr.io/x/y",
		"registry.local:443/team/app:1.0": "registry.local:443/team/app",
	} {
		if got := withoutTag(in); got != want {
			t.Errorf("withoutTag(%q) = %q, want %q", in, got, want)
		}
	}
}
