package main

import (
	"flag"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/docstest"
)

// swarmdCommands returns every command swarmd has ("swarmd", "swarmd
// bench", "swarmd model synth", ...) with its flags, read from the flag
// sets swarmd builds: the daemon's directly, each subcommand's as its -h
// prints them.
func swarmdCommands(t *testing.T) map[string]docstest.Flags {
	t.Helper()
	cmds := map[string]docstest.Flags{}
	_, fs, _ := parseDaemonFlags(nil, io.Discard)
	daemon := docstest.Flags{}
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		daemon[f.Name] = !ok || !b.IsBoolFlag()
	})
	cmds["swarmd"] = daemon
	help := func(args ...string) docstest.Flags {
		code, out, errs := runSwarmd(append(args, "-h")...)
		if code != 0 {
			t.Fatalf("swarmd %s -h: exit %d, %s", strings.Join(args, " "), code, errs)
		}
		return docstest.ParseDefaults(out)
	}
	for name := range subcommands {
		if name != "model" {
			cmds["swarmd "+name] = help(name)
			continue
		}
		for sub := range modelCommands {
			cmds["swarmd model "+sub] = help("model", sub)
		}
	}
	// run answers help itself, with the daemon's usage; it has no flags.
	if code, out, _ := runSwarmd("help"); code != 0 || !strings.Contains(out, "-bootstrap") {
		t.Fatalf("swarmd help: exit %d, %q", code, out)
	}
	cmds["swarmd help"] = docstest.Flags{}
	if len(cmds["swarmd"]) < 20 || len(cmds["swarmd bench"]) < 5 {
		t.Fatalf("read %d daemon flags and %d of bench: reading the flag sets is broken", len(cmds["swarmd"]), len(cmds["swarmd bench"]))
	}
	return cmds
}

// documentedCommands reads docs/cli.md: a heading that is one code span
// naming swarmd (### `swarmd model synth`) opens a command's section, and
// the rows of its tables whose first cell begins with a flag in code
// (`--layers A-B`, `-o OUT`) are its flags.
func documentedCommands(page docstest.Page, prog string) map[string]map[string]int {
	cmds := map[string]map[string]int{}
	for _, sec := range page.Sections() {
		cmd := docstest.HeadingCommand(sec.Heading)
		if cmd != prog && !strings.HasPrefix(cmd, prog+" ") {
			continue
		}
		flags := map[string]int{}
		for _, tbl := range sec.Tables {
			for _, row := range tbl.Rows {
				spans := docstest.Spans(row.Cells[0])
				if len(spans) == 0 {
					continue
				}
				if name, _, ok := docstest.Flag(strings.Fields(spans[0] + " ")[0]); ok {
					flags[name] = row.Line
				}
			}
		}
		cmds[cmd] = flags
	}
	return cmds
}

// TestDocFlags: every swarmd command has a section in docs/cli.md that
// lists each of its flags, and every command and flag listed there
// exists.
func TestDocFlags(t *testing.T) {
	page, err := docstest.Read("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	real := swarmdCommands(t)
	doc := documentedCommands(page, "swarmd")
	for _, cmd := range slices.Sorted(maps.Keys(real)) {
		flags, ok := doc[cmd]
		if !ok {
			t.Errorf("%s: command `%s` has no section (a heading ### `%s` with a table of its flags)", page.Path, cmd, cmd)
			continue
		}
		for _, f := range slices.Sorted(maps.Keys(real[cmd])) {
			if _, ok := flags[f]; !ok {
				t.Errorf("%s: flag -%s of `%s` is not documented in its section", page.Path, f, cmd)
			}
		}
	}
	for cmd, flags := range doc {
		have, ok := real[cmd]
		if !ok {
			t.Errorf("%s: section `%s` names a command swarmd does not have", page.Path, cmd)
			continue
		}
		for f, line := range flags {
			if _, ok := have[f]; !ok {
				t.Errorf("%s: `%s` has no flag -%s", page.Where(line), cmd, f)
			}
		}
	}
}

var wordRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// TestDocInvocations: every swarmd command line written in code anywhere in
// README.md or docs/ (swarmd --shard FILE:0-14, `swarmd model info FILE`)
// names a command swarmd has and only flags that command has.
func TestDocInvocations(t *testing.T) {
	pages, err := docstest.ReadAll("../..")
	if err != nil {
		t.Fatal(err)
	}
	real := swarmdCommands(t)
	n := 0
	for _, pg := range pages {
		for _, c := range pg.Code() {
			for _, inv := range docstest.Invocations(c, "swarmd") {
				n++
				if msg := checkInvocation(real, inv.Args); msg != "" {
					t.Errorf("%s: %s (in %q)", pg.Where(inv.Line), msg, c.Text)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found %d swarmd command lines: the page reader is broken", n)
	}
}

// checkInvocation checks one command line's words after "swarmd", and says
// what is wrong with it, or "".
func checkInvocation(real map[string]docstest.Flags, words []string) string {
	cmd := "swarmd"
	if len(words) > 0 && !strings.HasPrefix(words[0], "-") {
		w := words[0]
		switch _, sub := real["swarmd "+w]; {
		case w == "model":
			words = words[1:]
			if len(words) == 0 || strings.HasPrefix(words[0], "-") {
				return "" // the group itself
			}
			alts := strings.Split(words[0], "|")
			for _, a := range alts {
				if _, ok := modelCommands[a]; !ok {
					return "swarmd model has no command " + a
				}
			}
			if len(alts) > 1 {
				return ""
			}
			cmd, words = "swarmd model "+alts[0], words[1:]
		case sub:
			cmd, words = "swarmd "+w, words[1:]
		case wordRE.MatchString(w):
			return "swarmd has no command " + w
		}
	}
	if _, unknown := docstest.Args(words, real[cmd]); len(unknown) > 0 {
		return "`" + cmd + "` has no flag -" + strings.Join(unknown, ", -")
	}
	return ""
}
