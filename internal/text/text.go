// Package text holds the one way Kokumi shortens what it writes for people: a message cut at its
// end, a message cut in its middle, a long text cut at a line, the first names of a list and a
// count of the rest, and counts with thousands separators. Status stays small through these.
// Untrusted cleans what a tenant's program wrote before it reaches admins' tools.
package text

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxMessage caps a condition message, so that status stays small.
const MaxMessage = 1024

// MaxNamed is how many names Names lists before it counts the rest.
const MaxNamed = 5

// Truncate cuts s to at most n bytes, marking the cut with "…" at the end, without splitting a
// UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// ShortenMiddle cuts s to at most n bytes by taking out its middle, marked " … ": the start (what
// failed) and the end (the fix, which messages put last) stay, and no cut splits a UTF-8
// sequence.
func ShortenMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " … "
	keep := max(n-len(mark), 0)
	head, tail := keep-min(keep/3, 300), len(s)-min(keep/3, 300)
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + mark + s[tail:]
}

// TruncateLines cuts a long text (a manifest, a diff) to at most n bytes at the end of a line,
// and says so in a last line, which the cap leaves room for; what names the text in that note.
func TruncateLines(s string, n int, what string) string {
	if len(s) <= n {
		return s
	}
	room := max(n-256, 0) // the note
	cut := strings.LastIndexByte(s[:room], '\n') + 1
	if cut == 0 {
		cut = room
	}
	kept := strings.ToValidUTF8(s[:cut], "")
	if !strings.HasSuffix(kept, "\n") {
		kept += "\n"
	}
	return kept + fmt.Sprintf("# … truncated: %s is %d bytes, only the first %d are shown\n", what, len(s), len(kept))
}

// MaxUntrusted caps the text Untrusted returns.
const MaxUntrusted = 512

// markup are the characters that chat, incident and Markdown tools read as markup: links
// ([text](url), <url|text>), mentions (<!channel>, @here), emphasis, code, headings, HTML and its
// entities, escapes.
const markup = "<>[]{}`*_~|\\#!@&"

// Untrusted cleans text a tenant's program wrote (a verification Job's last words, the start of
// an HTTP answer) for tools that render it: control and format characters (line breaks, escape
// sequences, bidirectional overrides, zero-width characters) and markup characters each become a
// space, runs of spaces one, invalid UTF-8 goes, and the result is cut to MaxUntrusted bytes.
// Letters, digits and the other punctuation stay, so that the text still reads.
func Untrusted(s string) string {
	var b strings.Builder
	space := true // no leading space
	for _, r := range strings.ToValidUTF8(s, "") {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) || strings.ContainsRune(markup, r) ||
			r == utf8.RuneError || !unicode.IsPrint(r) {
			if !space {
				b.WriteByte(' ')
				space = true
			}
			continue
		}
		b.WriteRune(r)
		space = false
	}
	return Truncate(strings.TrimRight(b.String(), " "), MaxUntrusted)
}

// Names lists the first MaxNamed names and counts the others: "a, b, c, d, e … and 1,997 more".
func Names(names []string) string {
	return FirstNames(names, MaxNamed)
}

// FirstNames lists the first n names and counts the others: "a, b … and 1,997 more".
func FirstNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + " … and " + Thousands(len(names)-n) + " more"
}

// Thousands writes n with thousands separators: "10,000".
func Thousands[T ~int | ~int32 | ~int64](n T) string {
	s := fmt.Sprint(n)
	start := 0
	if strings.HasPrefix(s, "-") {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// JoinNonEmpty joins the parts that are not empty with "; ", as the parts of a message.
func JoinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
