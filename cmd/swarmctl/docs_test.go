package main

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/docstest"
)

// swarmctlFlags returns swarmctl's global flags and every command's flags
// (globals included), as `swarmctl -h` and `swarmctl COMMAND -h` print the
// flag sets swarmctl builds.
func swarmctlFlags(t *testing.T) (global docstest.Flags, cmds map[string]docstest.Flags) {
	t.Helper()
	code, out, errs := ctl(t, nil, "-h")
	if code != 0 {
		t.Fatalf("swarmctl -h: exit %d, %s", code, errs)
	}
	global = docstest.ParseDefaults(out)
	cmds = map[string]docstest.Flags{}
	for name := range commands {
		code, out, errs := ctl(t, nil, name, "-h")
		if code != 0 {
			t.Fatalf("swarmctl %s -h: exit %d, %s", name, code, errs)
		}
		cmds[name] = docstest.ParseDefaults(out)
	}
	if len(global) < 4 || len(cmds["ask"]) < len(global)+8 {
		t.Fatalf("read %d global flags and %d of ask: reading the flag sets is broken", len(global), len(cmds["ask"]))
	}
	return global, cmds
}

// documented reads docs/cli.md: the global flags are the flag rows of the
// section headed `swarmctl`; a table whose header begins with "command"
// has a row per form of each command, its first cell holding the form in
// code (`ask [--mode auto|moa] PROMPT...`, or several: `role add ROLE
// PATH.gguf`, `role rm ROLE`): the first word is the command, each --flag
// in it one of the command's flags.
func documented(t *testing.T, page docstest.Page) (global map[string]int, cmds map[string]map[string]int) {
	t.Helper()
	global, cmds = map[string]int{}, map[string]map[string]int{}
	tables := 0
	for _, sec := range page.Sections() {
		isGlobal := docstest.HeadingCommand(sec.Heading) == "swarmctl"
		for _, tbl := range sec.Tables {
			commandTable := len(tbl.Header) > 0 && tbl.Header[0] == "command"
			if commandTable {
				tables++
			}
			for _, row := range tbl.Rows {
				spans := docstest.Spans(row.Cells[0])
				switch {
				case isGlobal && len(spans) > 0:
					if name, _, ok := docstest.Flag(strings.Fields(spans[0] + " ")[0]); ok {
						global[name] = row.Line
					}
				case commandTable:
					if len(spans) == 0 {
						t.Errorf("%s: the first cell must hold the command in code", page.Where(row.Line))
					}
					for _, s := range spans {
						words := strings.Fields(s)
						if len(words) == 0 {
							continue
						}
						flags := cmds[words[0]]
						if flags == nil {
							flags = map[string]int{}
							cmds[words[0]] = flags
						}
						for _, w := range words[1:] {
							if name, _, ok := docstest.Flag(w); ok {
								flags[name] = row.Line
							}
						}
					}
				}
			}
		}
	}
	if tables == 0 || len(global) == 0 {
		t.Fatalf("%s: found %d command tables and %d global flags: want a table | command | ... | and a section headed `swarmctl` with a table of the global flags", page.Path, tables, len(global))
	}
	return global, cmds
}

// TestDocCommands: docs/cli.md documents every swarmctl command and each
// of its flags, and every global flag, and names no command or flag
// swarmctl does not have.
func TestDocCommands(t *testing.T) {
	page, err := docstest.Read("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	global, real := swarmctlFlags(t)
	docGlobal, doc := documented(t, page)
	for _, f := range slices.Sorted(maps.Keys(global)) {
		if _, ok := docGlobal[f]; !ok {
			t.Errorf("%s: global flag --%s is not in the table of global flags", page.Path, f)
		}
	}
	for f, line := range docGlobal {
		if _, ok := global[f]; !ok {
			t.Errorf("%s: swarmctl has no global flag --%s", page.Where(line), f)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(real)) {
		flags, ok := doc[name]
		if !ok {
			t.Errorf("%s: command %s has no row in the command table", page.Path, name)
			continue
		}
		for _, f := range slices.Sorted(maps.Keys(real[name])) {
			_, isGlobal := global[f]
			if _, ok := flags[f]; !ok && !isGlobal {
				t.Errorf("%s: flag --%s of %s is not documented in its row", page.Path, f, name)
			}
		}
	}
	for name, flags := range doc {
		have, ok := real[name]
		if !ok {
			t.Errorf("%s: swarmctl has no command %s", page.Path, name)
			continue
		}
		for f, line := range flags {
			if _, ok := have[f]; !ok {
				t.Errorf("%s: swarmctl %s has no flag --%s", page.Where(line), name, f)
			}
		}
	}
}

var wordRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// TestDocInvocations: every swarmctl command line written in code anywhere
// in README.md or docs/ (swarmctl ask --trace "...", `swarmctl --json
// peers`) names a command swarmctl has and only flags it has.
func TestDocInvocations(t *testing.T) {
	pages, err := docstest.ReadAll("../..")
	if err != nil {
		t.Fatal(err)
	}
	global, real := swarmctlFlags(t)
	n := 0
	for _, pg := range pages {
		for _, c := range pg.Code() {
			for _, inv := range docstest.Invocations(c, "swarmctl") {
				n++
				if msg := checkInvocation(global, real, inv.Args); msg != "" {
					t.Errorf("%s: %s (in %q)", pg.Where(inv.Line), msg, c.Text)
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("found %d swarmctl command lines: the page reader is broken", n)
	}
}

// checkInvocation checks one command line's words after "swarmctl": global
// flags, then the command (a word in capitals is a placeholder, COMMAND),
// then its arguments and flags. It says what is wrong, or "".
func checkInvocation(global docstest.Flags, real map[string]docstest.Flags, words []string) string {
	i := 0
	for ; i < len(words); i++ {
		name, inline, ok := docstest.Flag(words[i])
		if !ok {
			break
		}
		takes, known := global[name]
		switch {
		case name == "h" || name == "help":
		case !known:
			return "swarmctl has no global flag --" + name
		case takes && !inline:
			i++
		}
	}
	if i >= len(words) || !wordRE.MatchString(words[i]) {
		return "" // no command, or a placeholder
	}
	flags, ok := real[words[i]]
	if !ok {
		return "swarmctl has no command " + words[i]
	}
	if _, unknown := docstest.Args(words[i+1:], flags); len(unknown) > 0 {
		return "swarmctl " + words[i] + " has no flag --" + strings.Join(unknown, ", --")
	}
	return ""
}
