package notify

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// docSection is the section of docs/rollouts.md that prints the receivers.
const docSection = "### Verifying a delivery"

// docBlocks returns the fenced blocks of language lang in docSection of docs/rollouts.md.
func docBlocks(t *testing.T, lang string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "rollouts.md"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks []string
		block  []string
		in     bool
		inside bool
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block == nil && strings.HasPrefix(line, "#"):
			in = line == docSection
		case !in:
		case block == nil && line == "```"+lang:
			block, inside = []string{}, true
		case inside && line == "```":
			blocks = append(blocks, strings.Join(block, "\n")+"\n")
			block, inside = nil, false
		case inside:
			block = append(block, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("no ```%s block in %q of docs/rollouts.md", lang, docSection)
	}
	return blocks
}

// The Go receiver the documentation prints is Verify, word for word.
func TestTheDocumentedReceiversAreTheTestedOnes(t *testing.T) {
	src, err := os.ReadFile("verify.go")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(src, []byte("func Verify("))
	if i < 0 {
		t.Fatal("no func Verify in verify.go")
	}
	if doc, code := docBlocks(t, "go")[0], string(src[i:]); doc != code {
		t.Errorf("the Go receiver of docs/rollouts.md is not Verify of verify.go:\n%s\nwant\n%s", doc, code)
	}
	if len(docBlocks(t, "sh")) != 1 {
		t.Errorf("%q prints %d shell receivers, want 1", docSection, len(docBlocks(t, "sh")))
	}
}

// captured is one delivery a receiver got, as a receiver reads it.
type captured struct {
	id, timestamp, signature string
	body                     []byte
}

// deliver sends the pause to a webhook keyed with chatKey from a Notifier whose clock is now,
// and returns what the webhook got.
func deliver(t *testing.T, now func() time.Time) captured {
	t.Helper()
	hook := newReceiver(t)
	n := start(t, Options{Now: now}, secret("hooks", "chat", chatKey))
	n.Notify(environment(v1.Notification{Name: "chat", URL: hook.URL, SecretRef: &v1.SecretKeyRef{Name: "hooks", Key: "chat"}}), serving, paused)
	r := hook.waitFor(t, 1)[0]
	return captured{r.header.Get(IDHeader), r.header.Get(TimestampHeader), r.header.Get(SignatureHeader), r.body}
}

// A delivery recorded and played again more than five minutes later fails the documented
// verification, and so does one whose timestamp, id or body was changed to pass it, or another
// key's; the fresh delivery passes.
func TestAReplayedDeliveryWithAStaleTimestampFailsTheVerification(t *testing.T) {
	d := deliver(t, nil) // sent at at
	other := KeyPrefix + base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!"))
	fresh := at.Add(Tolerance + time.Second)
	for _, c := range []struct {
		name                string
		secret, id, ts, sig string
		body                string
		now                 time.Time
		accepted            bool
	}{
		{"the delivery, as sent", chatKey, d.id, d.timestamp, d.signature, string(d.body), at, true},
		{"the delivery, 5 minutes later", chatKey, d.id, d.timestamp, d.signature, string(d.body), at.Add(Tolerance), true},
		{"the delivery with a clock 5 minutes ahead of the receiver's", chatKey, d.id, d.timestamp, d.signature, string(d.body), at.Add(-Tolerance), true},
		{"a replay more than 5 minutes later", chatKey, d.id, d.timestamp, d.signature, string(d.body), fresh, false},
		{"a replay with a fresh timestamp", chatKey, d.id, "1796479501", d.signature, string(d.body), fresh, false},
		{"a replay with another id", chatKey, d.id + "0", d.timestamp, d.signature, string(d.body), at, false},
		{"a changed body", chatKey, d.id, d.timestamp, d.signature, strings.Replace(string(d.body), "RolloutPaused", "RolloutComplete", 1), at, false},
		{"another key", other, d.id, d.timestamp, d.signature, string(d.body), at, false},
		{"no timestamp", chatKey, d.id, "", d.signature, string(d.body), at, false},
		{"no signature", chatKey, d.id, d.timestamp, "", string(d.body), at, false},
		{"a signature of the body alone", chatKey, d.id, d.timestamp, "v1," + Sign(chatKeyBytes, "", 0, d.body)[3:], string(d.body), at, false},
		{"among other signatures", chatKey, d.id, d.timestamp, "v1,AAAA " + d.signature, string(d.body), at, true},
	} {
		err := Verify(c.secret, c.id, c.ts, c.sig, []byte(c.body), c.now)
		if (err == nil) != c.accepted {
			t.Errorf("%s: Verify = %v, want accepted %v", c.name, err, c.accepted)
		}
	}
}

// The shell receiver the documentation prints, run by bash with openssl, accepts a delivery
// Kokumi just sent and refuses one sent more than five minutes ago (a replay), a changed body
// and another key.
func TestTheShellReceiverAcceptsADeliveryAndRefusesAReplay(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "base64", "od", "mktemp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine (.ci/run installs openssl): %v", tool, err)
		}
	}
	script := filepath.Join(t.TempDir(), "verify")
	if err := os.WriteFile(script, []byte(docBlocks(t, "sh")[0]), 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(secret string, d captured, body []byte) (bool, string) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret, "WEBHOOK_ID="+d.id, "WEBHOOK_TIMESTAMP="+d.timestamp, "WEBHOOK_SIGNATURE="+d.signature)
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		return err == nil, string(out)
	}
	now := deliver(t, time.Now)
	if ok, out := run(chatKey, now, now.body); !ok {
		t.Errorf("the shell receiver refuses a delivery just sent: %s", out)
	}
	stale := deliver(t, func() time.Time { return time.Now().Add(-Tolerance - time.Minute) })
	if ok, out := run(chatKey, stale, stale.body); ok || !strings.Contains(out, "more than 5 minutes away") {
		t.Errorf("the shell receiver accepts a delivery sent 6 minutes ago (%s)", out)
	}
	if ok, _ := run(chatKey, now, append(bytes.Clone(now.body), ' ')); ok {
		t.Error("the shell receiver accepts a changed body")
	}
	if ok, _ := run(KeyPrefix+base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!")), now, now.body); ok {
		t.Error("the shell receiver accepts another key's delivery")
	}
}
