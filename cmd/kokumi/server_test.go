package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestTheAdminTokenIsOptIn(t *testing.T) {
	t.Setenv("KOKUMI_TOKEN", "")
	if tok, err := readAdminToken(""); tok != "" || err != nil {
		t.Errorf("no flag, no KOKUMI_TOKEN: %q %v, want no admin token", tok, err)
	}
	t.Setenv("KOKUMI_TOKEN", " from-env \n")
	if tok, err := readAdminToken(""); tok != "from-env" || err != nil {
		t.Errorf("KOKUMI_TOKEN: %q %v", tok, err)
	}
	dir := t.TempDir()
	empty, full := filepath.Join(dir, "empty"), filepath.Join(dir, "full")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readAdminToken(empty); err == nil {
		t.Error("an empty --admin-token-file is accepted")
	}
	if tok, err := readAdminToken(full); tok != "from-file" || err != nil {
		t.Errorf("--admin-token-file: %q %v", tok, err)
	}
}

func TestSecureCookiesKnowsWhetherItWasSet(t *testing.T) {
	for _, c := range []struct {
		args []string
		want *bool
	}{
		{nil, nil},
		{[]string{"--secure-cookies"}, boolPtr(true)},
		{[]string{"--secure-cookies=false"}, boolPtr(false)},
	} {
		fs := newFlagSet("server", io.Discard)
		var b optionalBool
		fs.Var(&b, "secure-cookies", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if (b.value == nil) != (c.want == nil) || (b.value != nil && *b.value != *c.want) {
			t.Errorf("%v: %v, want %v", c.args, b.String(), c.want)
		}
	}
}

func boolPtr(v bool) *bool { return &v }
