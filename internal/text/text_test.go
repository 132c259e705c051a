package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsShortTextAndMarksTheCutOfALongOne(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Fatalf("Truncate(short) = %q", got)
	}
	got := Truncate(strings.Repeat("é", 20), 11)
	if len(got) > 11 || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("Truncate = %q (%d bytes)", got, len(got))
	}
}

func TestShortenMiddleKeepsTheStartAndTheFix(t *testing.T) {
	s := "render failed: " + strings.Repeat("x", 5000) + " — fix: set spec.values"
	got := ShortenMiddle(s, 1024)
	if len(got) > 1024 || !strings.HasPrefix(got, "render failed: ") || !strings.HasSuffix(got, "fix: set spec.values") || !strings.Contains(got, " … ") {
		t.Fatalf("ShortenMiddle = %q (%d bytes)", got, len(got))
	}
}

func TestTruncateLinesCutsAtALineAndSaysSo(t *testing.T) {
	s := strings.Repeat("line of text\n", 1000)
	got := TruncateLines(s, 1024, "the manifest")
	if len(got) > 1024 || !strings.Contains(got, "# … truncated: the manifest is 13000 bytes") {
		t.Fatalf("TruncateLines = %q", got)
	}
	body := got[:strings.LastIndex(got, "# …")]
	if !strings.HasSuffix(body, "line of text\n") {
		t.Fatalf("not cut at a line: %q", body[len(body)-20:])
	}
}

func TestNamesListsFiveAndCountsTheRest(t *testing.T) {
	names := make([]string, 2002)
	for i := range names {
		names[i] = "c"
	}
	if got := Names(names); got != "c, c, c, c, c … and 1,997 more" {
		t.Fatalf("Names = %q", got)
	}
	if got := Names([]string{"a", "b"}); got != "a, b" {
		t.Fatalf("Names = %q", got)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestUntrustedTextLosesControlsAndMarkupAndStaysReadable(t *testing.T) {
	for in, want := range map[string]string{
		"smoke: GET /healthz answered 500\nretrying is not asked for":       "smoke: GET /healthz answered 500 retrying is not asked for",
		"<!channel> all clear, [approve here](https://evil.example/) @here": "channel all clear, approve here (https://evil.example/) here",
		"\x1b[31mred\x1b[0m\tand\r\nbold **yes** `rm -rf` <b>x</b>":         "31mred 0m and bold yes rm -rf b x /b",
		"ok\u202edesrever\u200b zero\u2066width":                            "ok desrever zero width",
		"bad \xff utf-8 ëtoile":                                             "bad utf-8 ëtoile",
		"   ":                                                               "",
		"{\"error_rate\": \"0.5\"} | 50% & more #1 ~x~ \\n":                 "\"error rate\": \"0.5\" 50% more 1 x n",
	} {
		if got := Untrusted(in); got != want {
			t.Errorf("Untrusted(%q) = %q, want %q", in, got, want)
		}
	}
	long := Untrusted(strings.Repeat("é", 1000))
	if len(long) > MaxUntrusted || !strings.HasSuffix(long, "…") || !utf8.ValidString(long) {
		t.Errorf("a long text is %d bytes, valid %v: %q…", len(long), utf8.ValidString(long), long[:20])
	}
}
