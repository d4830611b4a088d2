package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/version"
)

// ctl runs swarmctl in-process with stdin (a terminal when stdin is nil).
func ctl(t *testing.T, stdin *string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("SWARM_API", "")
	t.Setenv("SWARM_API_TOKEN", "")
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdinTTY: stdin == nil, stdout: &out, stderr: &errb}
	if stdin != nil {
		e.stdin = strings.NewReader(*stdin)
	}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// TestUsageErrors: every bad command line exits 2 with a message naming the
// problem, before any call to a daemon.
func TestUsageErrors(t *testing.T) {
	empty, blank := "", "  \n\t"
	cases := []struct {
		name  string
		stdin *string
		args  []string
		want  string
	}{
		{"no command", nil, nil, "Usage: swarmctl"},
		{"unknown command", nil, []string{"frob"}, `unknown command "frob"`},
		{"unknown flag", nil, []string{"status", "--bogus"}, "flag provided but not defined: -bogus"},
		{"unknown flag after the prompt", nil, []string{"ask", "hi", "--max-token", "2"}, "flag provided but not defined: -max-token"},
		{"api garbage", nil, []string{"--api", "garbage", "status"}, `--api "garbage" is malformed`},
		{"api no port", nil, []string{"status", "--api", "127.0.0.1"}, "is malformed: no port"},
		{"api bad port", nil, []string{"--api", "localhost:http", "id"}, `port "http"`},
		{"api port 0", nil, []string{"--api", "127.0.0.1:0", "id"}, `port "0"`},
		{"api https", nil, []string{"--api", "https://127.0.0.1:7433", "id"}, `scheme "https" is not supported`},
		{"api path", nil, []string{"--api", "http://127.0.0.1:7433/v1", "id"}, "no path"},
		{"api empty", nil, []string{"--api", "", "peers"}, "is malformed"},
		{"no question", nil, []string{"ask"}, "ask needs a question"},
		{"empty stdin", &empty, []string{"ask", "-"}, "stdin held no question"},
		{"blank piped stdin", &blank, []string{"ask"}, "stdin held no question"},
		{"stdin and arguments", nil, []string{"ask", "-", "why"}, "not both"},
		{"temperature negative", nil, []string{"ask", "--temperature", "-5", "hi"}, "--temperature -5: want 0..2"},
		{"temperature huge", nil, []string{"ask", "hi", "--temperature", "9"}, "--temperature 9"},
		{"temperature NaN", nil, []string{"ask", "hi", "--temperature", "NaN"}, "--temperature NaN"},
		{"max tokens zero", nil, []string{"ask", "--max-tokens", "0", "hi"}, "--max-tokens 0: want 1..8192"},
		{"max tokens negative", nil, []string{"ask", "hi", "--max-tokens", "-2"}, "--max-tokens -2"},
		{"seed negative", nil, []string{"ask", "--seed", "-1", "hi"}, "--seed -1"},
		{"seed past 2^64", nil, []string{"ask", "--seed", "18446744073709551616", "hi"}, "--seed 18446744073709551616: want an integer 0..18446744073709551615"},
		{"seed not a number", nil, []string{"ask", "--seed", "lucky", "hi"}, "--seed lucky"},
		{"repeat penalty", nil, []string{"ask", "--repeat-penalty", "-1", "hi"}, "--repeat-penalty -1"},
		{"mode", nil, []string{"ask", "--mode", "fast", "hi"}, `--mode "fast": want auto, moa, speed, pipeline or a role (reasoner, writer,`},
		{"dtype", nil, []string{"ask", "--dtype", "f64", "hi"}, `--dtype "f64"`},
		{"timeout negative", nil, []string{"--timeout", "-1s", "status"}, "--timeout -1s"},
		{"timeout too long for ask", nil, []string{"ask", "--timeout", "1h", "hi"}, "--timeout 1h0m0s: at most 10m"},
		{"status argument", nil, []string{"status", "now"}, `status takes no arguments, got "now"`},
		{"plan two models", nil, []string{"plan", "a", "b"}, "plan takes one model"},
		{"bench no target", nil, []string{"bench"}, "bench needs a target"},
		{"bench bad target", nil, []string{"bench", "--n", "2", "gpu"}, "bench needs a target"},
		{"version argument", nil, []string{"version", "x"}, "version takes no arguments"},
		{"help unknown", nil, []string{"help", "frob"}, `unknown command "frob"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := ctl(t, c.stdin, c.args...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Fatalf("swarmctl %q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
			}
		})
	}
}

// TestUsageErrorNamesCommandHelp: a command's usage error points at that
// command's help, not at swarmctl's.
func TestUsageErrorNamesCommandHelp(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ask", "--bogus", "hi"}, "Run 'swarmctl ask -h' for usage."},
		{[]string{"--json", "ps", "--bogus"}, "Run 'swarmctl ps -h' for usage."},
		{[]string{"status", "now"}, "Run 'swarmctl status -h' for usage."},
		{[]string{"--bogus"}, "Run 'swarmctl -h' for usage."},
		{[]string{"help", "frob"}, "Run 'swarmctl -h' for usage."},
	}
	for _, c := range cases {
		code, _, errs := ctl(t, nil, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("swarmctl %q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// TestHelp: -h on swarmctl and on every command exits 0 and names the
// command's positional arguments.
func TestHelp(t *testing.T) {
	for name, cmd := range commands {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			if name == "help" && args[0] == "help" && len(args) == 2 && args[1] == "help" {
				continue
			}
			code, out, errs := ctl(t, nil, args...)
			want := "Usage: swarmctl " + name + " [flags] " + cmd.args
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("swarmctl %q: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, out, errs, want)
			}
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, _ := ctl(t, nil, args...)
		if code != 0 || !strings.Contains(out, "Commands:") || !strings.Contains(out, "version") {
			t.Errorf("swarmctl %q: exit %d, stdout %q", args, code, out)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, errs := ctl(t, nil, "version")
	if want := "swarmctl " + version.String() + "\n"; code != 0 || out != want {
		t.Fatalf("version: exit %d, %q (%s); want %q", code, out, errs, want)
	}
}

// TestRuntimeErrors: a daemon that is not there, or that hangs, is a
// runtime failure (exit 1) whose message names the cause.
func TestRuntimeErrors(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	// A daemon that accepts connections and never answers.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--api", closedAddr, "status"}, "swarmd is not running at " + closedAddr},
		{[]string{"--api", "http://" + closedAddr + "/", "peers"}, "swarmd is not running at " + closedAddr},
		{[]string{"--api", hung.Addr().String(), "status", "--timeout", "300ms"},
			"timed out after 300ms waiting for swarmd at " + hung.Addr().String() + " (--timeout 300ms)"},
		{[]string{"--timeout", "200ms", "--api", hung.Addr().String(), "plan", "m"}, "timed out after 200ms"},
		// A role name is a mode, as in the API and chat: asked, not refused.
		{[]string{"--api", closedAddr, "ask", "--mode", "writer", "hi"}, "swarmd is not running at " + closedAddr},
	}
	for _, c := range cases {
		code, _, errs := ctl(t, nil, c.args...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("swarmctl %q: exit %d, stderr %q; want 1 and %q", c.args, code, errs, c.want)
		}
	}
}

func TestPrompt(t *testing.T) {
	cases := []struct {
		name  string
		pos   []string
		stdin string
		tty   bool
		want  string
	}{
		{"arguments", []string{"why", "is", "the", "sky", "blue?"}, "ignored", false, "why is the sky blue?"},
		{"dash", []string{"-"}, "  what is 2+2?\n", true, "what is 2+2?"},
		{"dash, piped", []string{"-"}, "piped\n", false, "piped"},
		{"pipe, no arguments", nil, "line one\nline two\n", false, "line one\nline two"},
		{"a leading dash word after --", []string{"-5", "+", "3"}, "", true, "-5 + 3"},
	}
	for _, c := range cases {
		e := &env{stdin: strings.NewReader(c.stdin), stdinTTY: c.tty}
		got, err := e.prompt(c.pos)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
