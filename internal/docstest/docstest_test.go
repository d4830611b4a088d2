package docstest

import (
	"flag"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestSplitRow(t *testing.T) {
	cases := []struct {
		line string
		want []string
	}{
		{"| a | b |", []string{"a", "b"}},
		{"| `x\\|y` | z", []string{"`x\\|y`", "z"}},
		{"|---|:--:|", []string{"---", ":--:"}},
	}
	for _, c := range cases {
		if got := SplitRow(c.line); !reflect.DeepEqual(got, c.want) {
			t.Errorf("SplitRow(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}

func TestSpans(t *testing.T) {
	got := Spans("`a` and `b\\|c`, then ` unclosed")
	if want := []string{"a", "b|c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Spans = %q, want %q", got, want)
	}
}

const page = "# T\n\n" +
	"| key | x |\n|---|---|\n| `a.b` | 1 |\n\n" +
	"## `swarmd bench`\n\nrun `swarmd bench\n--model F` here\n\n" +
	"```sh\n# a comment with `swarmd --no`\nsudo install swarmd /bin # swarmd --no\nX=1 bin/swarmd --data D | swarmctl ask \"--no\" && swarmd version\n```\n" +
	"| command | what |\n|---|---|\n| `ask [--mode a\\|b]` | x |\n"

func TestSections(t *testing.T) {
	secs := Page{Lines: strings.Split(page, "\n")}.Sections()
	if len(secs) != 3 || secs[1].Heading != "T" || HeadingCommand(secs[2].Heading) != "swarmd bench" {
		t.Fatalf("sections %+v", secs)
	}
	if tb := secs[1].Tables; len(tb) != 1 || tb[0].Header[0] != "key" || tb[0].Rows[0].Line != 5 || tb[0].Rows[0].Cells[0] != "`a.b`" {
		t.Fatalf("tables of T: %+v", tb)
	}
	if tb := secs[2].Tables; len(tb) != 1 || tb[0].Header[0] != "command" || Spans(tb[0].Rows[0].Cells[0])[0] != "ask [--mode a|b]" {
		t.Fatalf("tables of swarmd bench: %+v", tb)
	}
}

func TestInvocations(t *testing.T) {
	pg := Page{Lines: strings.Split(page, "\n")}
	var got []string
	for _, c := range pg.Code() {
		for _, prog := range []string{"swarmd", "swarmctl"} {
			for _, inv := range Invocations(c, prog) {
				got = append(got, strings.Join(append([]string{strconv.Itoa(inv.Line), prog}, inv.Args...), " "))
			}
		}
	}
	// Not: comments, swarmd as an argument of install.
	want := []string{
		"7 swarmd bench",
		"9 swarmd bench --model F", // a span over a line break
		"15 swarmd --data D",
		"15 swarmd version",
		"15 swarmctl ask --no",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("invocations\n%q\nwant\n%q", got, want)
	}
}

func TestArgs(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("n", 1, "count `N`")
	fs.Bool("v", false, "verbose")
	fs.String("model", "", "the model")
	var out strings.Builder
	fs.SetOutput(&out)
	fs.PrintDefaults()
	flags := ParseDefaults(out.String())
	if want := (Flags{"n": true, "v": false, "model": true}); !reflect.DeepEqual(flags, want) {
		t.Fatalf("ParseDefaults = %v, want %v\n%s", flags, want, out.String())
	}
	pos, unknown := Args([]string{"[--n", "3]", "-v", "--model=m", "P", "--bogus", "-h", "--", "--after"}, flags)
	if !reflect.DeepEqual(pos, []string{"P"}) || !reflect.DeepEqual(unknown, []string{"bogus"}) {
		t.Fatalf("Args: pos %q, unknown %q", pos, unknown)
	}
	for _, w := range []string{"-", "--", "PROMPT...|-", "[flags]"} {
		if _, _, ok := Flag(w); ok {
			t.Errorf("Flag(%q) took it for a flag", w)
		}
	}
	if name, inline, ok := Flag("--speculate[=false]"); name != "speculate" || !inline || !ok {
		t.Errorf("Flag(--speculate[=false]) = %q, %v, %v", name, inline, ok)
	}
}
