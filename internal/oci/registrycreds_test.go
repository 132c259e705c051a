package oci

import "testing"

func TestNamespacePullersAreDerivedPerNamespaceAndKey(t *testing.T) {
	creds, err := GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	a, again, b := creds.NamespacePuller("team-a"), creds.NamespacePuller("team-a"), creds.NamespacePuller("team-b")
	if a != again || a.Username != "pull-team-a" || a.Password == b.Password {
		t.Errorf("pullers %+v, %+v: want pull-<namespace>, stable, distinct per namespace", a, b)
	}
	rotated, err := GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	if rotated.NamespacePuller("team-a").Password == a.Password {
		t.Error("a new pusher password kept the namespace's puller")
	}
	for name, want := range map[string]string{"pull-team-a": "team-a", "pull-": "", "pull-Team": "", "pull-a/b": "", "kokumi-puller": "", "pull-" + string(make([]byte, 64)): ""} {
		if ns, ok := NamespaceOfPuller(name); ok != (want != "") || (ok && ns != want) {
			t.Errorf("NamespaceOfPuller(%q) = %q, %v; want %q", name, ns, ok, want)
		}
	}
	data := creds.Data()
	data[PullerUsernameKey] = []byte("pull-team-a")
	if _, err := ParseRegistryCredentials(data); err == nil {
		t.Error("a stored puller named like a namespace's puller was accepted")
	}
}

func TestOwnerOfRepository(t *testing.T) {
	for repo, want := range map[string]string{
		"kokumi/team-a/app": "team-a", "vendor/team-a/ghcr.io/x": "team-a",
		"kokumi/team-a": "", "kokumi": "", "charts/podinfo": "", "kokumi//app": "", "vendorx/team-a/app": "",
	} {
		if ns, ok := OwnerOfRepository(repo); ns != want || ok != (want != "") {
			t.Errorf("OwnerOfRepository(%q) = %q, %v; want %q", repo, ns, ok, want)
		}
	}
}
