// Package cli holds the command-line conventions swarmd and swarmctl share:
// flags anywhere among the arguments, "--" ending them. It uses only the
// standard library, so swarmctl stays free of libp2p and cgo.
package cli

import (
	"flag"
	"strings"
)

// Parse parses args with fs, allowing flags before, between and after the
// positional arguments, which it returns in order. "--" ends the flags:
// every argument after it is positional, even one that starts with "-". A
// lone "-" is positional (it usually means stdin).
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at a positional argument without consuming it,
		// and at "--" after consuming it.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" && !takesValue(fs, args[:n-1]) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// takesValue reports whether the last of before is a flag that took the
// argument after it as its value (as in --model --).
func takesValue(fs *flag.FlagSet, before []string) bool {
	if len(before) == 0 {
		return false
	}
	a := before[len(before)-1]
	name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if name == a || name == "" || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// Given reports which flags of fs the command line set, so that a value
// given explicitly (--slots 0) can be told from the default.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
