package badinput

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// update rewrites the table of docs/bad-input.md from the test's table.
var update = flag.Bool("update", false, "rewrite the table of docs/bad-input.md from the test's table")

const (
	docPath    = "../../docs/bad-input.md"
	tableBegin = "<!-- The table is generated from test/badinput: go test ./test/badinput -run TestTheDocListsEveryCase -update -->\n"
	tableEnd   = "<!-- end of the generated table -->\n"
)

// docTable renders the test's table as the doc shows it.
func docTable() string {
	var b strings.Builder
	b.WriteString("| kind | bad input | what you see | the message names | what keeps running |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, row := range table {
		sees := "refused by the API server"
		if row.on != refusedAt {
			status := "False"
			if row.reason == "Deployed" {
				status = "True"
			}
			sees = fmt.Sprintf("%s `Ready=%s`, `%s`", row.on, status, row.reason)
		}
		also := make([]string, 0, len(row.also))
		for kind, reason := range row.also {
			also = append(also, fmt.Sprintf("%s `%s`", kind, reason))
		}
		sort.Strings(also)
		for _, a := range also {
			sees += "; " + a
		}
		names := make([]string, len(row.mentions))
		for i, m := range row.mentions {
			names[i] = "`" + m + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.kind, cell(row.input), sees, cell(strings.Join(names, ", ")), cell(row.keeps))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// TestTheDocListsEveryCase checks that docs/bad-input.md shows the test's table as it is;
// -update rewrites it.
func TestTheDocListsEveryCase(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(doc, []byte(tableBegin))
	end := bytes.Index(doc, []byte(tableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers of the generated table", docPath)
	}
	have := string(doc[begin+len(tableBegin) : end])
	want := docTable()
	if have == want {
		return
	}
	if !*update {
		t.Fatalf("the table of %s is not the test's: run go test ./test/badinput -run TestTheDocListsEveryCase -update", docPath)
	}
	out := append(append(append([]byte{}, doc[:begin+len(tableBegin)]...), want...), doc[end:]...)
	if err := os.WriteFile(docPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
