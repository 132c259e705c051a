package main

import (
	"flag"
	"strings"
)

// commaList splits a comma-separated flag value into its items, each trimmed, the empty ones
// dropped.
func commaList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// listFlag defines a flag of comma-separated values (commaList) that appends them to *list, a
// repeated flag appending again; check, when not nil, vets the whole list after each.
func listFlag(fs *flag.FlagSet, name, usage string, list *[]string, check func([]string) error) {
	fs.Func(name, usage, func(v string) error {
		*list = append(*list, commaList(v)...)
		if check == nil {
			return nil
		}
		return check(*list)
	})
}
