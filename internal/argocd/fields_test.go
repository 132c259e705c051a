package argocd

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestFieldsAreWhatJSONMarshalWrites: the spec fields written directly are byte for byte what
// json.Marshal writes of specMap, so that an Application written before compares equal without
// being decoded again, whatever the strings hold.
func TestFieldsAreWhatJSONMarshalWrites(t *testing.T) {
	base := ApplicationSpec{Name: "a", Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo", Cluster: "edge-1",
		Project: "fleet", RepoURL: "oci://registry.example/team-a/podinfo", Revision: "sha256:aa",
		Server: "https://edge-1.example:6443", TargetNamespace: "podinfo", Retry: DefaultSyncRetry}
	odd := base
	odd.Project, odd.RepoURL, odd.Revision = `a"b\c<d>&e`, "oci://r/ü/\u2028x", "tab\there\nnew"
	odd.Server, odd.TargetNamespace = "", "\x01"
	noRetry := base
	noRetry.Retry = SyncRetry{}
	other := base
	other.Retry = SyncRetry{Limit: -1, Backoff: time.Second, Factor: 3, MaxBackoff: time.Hour}
	for name, s := range map[string]ApplicationSpec{"plain": base, "escaped": odd, "no retry": noRetry, "other retry": other} {
		m := s.specMap()
		want := ApplicationFields{Project: mustJSON(m["project"]), Source: mustJSON(m["source"]),
			Destination: mustJSON(m["destination"]), SyncPolicy: mustJSON(m["syncPolicy"])}
		for i := range 2 { // the second time, the sync policy is the one remembered
			if got := s.fields(); got.Project != want.Project || got.Source != want.Source || got.Destination != want.Destination || got.SyncPolicy != want.SyncPolicy {
				t.Errorf("%s (%d): fields() = %+v, want %+v", name, i, got, want)
			}
		}
	}
}

// TestNewIsWhatBuildWrites: the typed Application a create sends is the unstructured one Build
// returns, once both are encoded and read back (but a null creationTimestamp).
func TestNewIsWhatBuildWrites(t *testing.T) {
	s := ApplicationSpec{Name: "a", Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo", ServingUID: "uid-1",
		Cluster: "edge-1", Project: "fleet", RepoURL: "oci://registry.example/team-a/podinfo", Revision: "sha256:aa",
		Server: "https://edge-1.example:6443", TargetNamespace: "podinfo", Retry: DefaultSyncRetry}
	read := func(v any) map[string]any {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	typed, built := read(s.New()), read(s.Build().Object)
	meta := typed["metadata"].(map[string]any)
	if ts, ok := meta["creationTimestamp"]; ok && ts != nil {
		t.Fatalf("creationTimestamp = %v; want none or null", ts)
	}
	delete(meta, "creationTimestamp")
	if !reflect.DeepEqual(typed, built) {
		t.Errorf("New() encodes as\n%v\nBuild() as\n%v", typed, built)
	}
}
