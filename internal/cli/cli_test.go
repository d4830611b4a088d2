package cli

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		args    []string
		pos     []string
		n       int
		verbose bool
		name    string
	}{
		{[]string{"hi", "--n", "2"}, []string{"hi"}, 2, false, ""},
		{[]string{"--n", "3", "hi", "there"}, []string{"hi", "there"}, 3, false, ""},
		{[]string{"a", "-v", "b", "--name=x", "c"}, []string{"a", "b", "c"}, 0, true, "x"},
		{[]string{"a", "--", "--n", "2", "-v"}, []string{"a", "--n", "2", "-v"}, 0, false, ""},
		{[]string{"--", "-"}, []string{"-"}, 0, false, ""},
		{[]string{"-", "--n", "4"}, []string{"-"}, 4, false, ""},
		{[]string{"--name", "--", "a", "--n", "5"}, []string{"a"}, 5, false, "--"}, // "--" as a flag's value is a value
		{nil, nil, 0, false, ""},
	}
	for _, c := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := fs.Int("n", 0, "")
		v := fs.Bool("v", false, "")
		name := fs.String("name", "", "")
		pos, err := Parse(fs, c.args)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !slices.Equal(pos, c.pos) || *n != c.n || *v != c.verbose || *name != c.name {
			t.Errorf("%q: pos %q n %d v %v name %q; want %q %d %v %q", c.args, pos, *n, *v, *name, c.pos, c.n, c.verbose, c.name)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Parse(fs, []string{"a", "--bogus"}); err == nil {
		t.Error("an unknown flag after a positional argument was accepted")
	}
}

func TestGiven(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("slots", 4, "")
	fs.Int("threads", 0, "")
	if _, err := Parse(fs, []string{"--slots", "4"}); err != nil {
		t.Fatal(err)
	}
	if g := Given(fs); !g["slots"] || g["threads"] {
		t.Fatalf("Given = %v", g)
	}
}
