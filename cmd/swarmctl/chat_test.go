package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

func TestParseChatLine(t *testing.T) {
	cases := []struct {
		line    string
		name    string
		args    []string
		text    string
		wantErr string
	}{
		{"  why is the sky blue?  ", "", nil, "why is the sky blue?", ""},
		{"", "", nil, "", ""},
		{"//etc/hosts is what?", "", nil, "/etc/hosts is what?", ""},
		{"/mode moa", "mode", []string{"moa"}, "", ""},
		{"/MODE speed", "mode", []string{"speed"}, "", ""},
		{"/mode pipeline tiny-llama", "mode", []string{"pipeline", "tiny-llama"}, "", ""},
		{"/mode pipeline", "mode", []string{"pipeline"}, "", ""},
		{"/mode concise", "mode", []string{"concise"}, "", ""},
		{"/mode writer", "mode", []string{"writer"}, "", ""},
		{"/mode bogus", "", nil, "", `/mode "bogus": want auto, moa, speed, pipeline or a role (reasoner, writer,`},
		{"/mode", "", nil, "", "usage: /mode"},
		{"/mode moa extra", "", nil, "", "/mode moa takes no model"},
		{"/mode Fast!", "", nil, "", `/mode "Fast!": want auto`},
		{"/trace on", "trace", []string{"on"}, "", ""},
		{"/trace off", "trace", []string{"off"}, "", ""},
		{"/trace", "", nil, "", "usage: /trace on|off"},
		{"/trace maybe", "", nil, "", `/trace "maybe": want on or off`},
		{"/reset", "reset", []string{}, "", ""},
		{"/reset now", "", nil, "", "usage: /reset"},
		{"/help", "help", []string{}, "", ""},
		{"/quit", "quit", []string{}, "", ""},
		{"/exit", "quit", []string{}, "", ""},
		{"/bye", "quit", []string{}, "", ""},
		{"/frob", "", nil, "", "unknown command /frob"},
		{"/", "", nil, "", "unknown command /"},
	}
	for _, c := range cases {
		got, err := parseChatLine(c.line)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: %v; want an error with %q", c.line, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.name != c.name || got.text != c.text || !reflect.DeepEqual(got.args, c.args) {
			t.Errorf("%q: %+v, %v; want name %q args %q text %q", c.line, got, err, c.name, c.args, c.text)
		}
	}
}

// TestChatHistory: each query carries every finished turn as its history,
// then the new question; /reset forgets them; the mode and model go as
// ask's --mode and --model.
func TestChatHistory(t *testing.T) {
	s := &chatSession{e: &env{stderr: new(bytes.Buffer)}, mode: "auto"}
	r := s.request("one")
	if r.Query != "one" || len(r.History) != 0 || r.Mode != "auto" || r.Model != "" || !r.Stream {
		t.Fatalf("first request %+v", r)
	}
	if r.Temperature != nil || r.Seed != nil {
		t.Fatalf("chat is greedy unless told otherwise, like ask: temperature %v, seed %v", r.Temperature, r.Seed)
	}
	s.remember("one", "1")
	s.remember("two", "2")
	r = s.request("three")
	want := []client.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "1"},
		{Role: "user", Content: "two"}, {Role: "assistant", Content: "2"}}
	if r.Query != "three" || !reflect.DeepEqual(r.History, want) {
		t.Fatalf("third request: %q after %+v; want three after %+v", r.Query, r.History, want)
	}
	r.History[0].Content = "changed"
	s.remember("four", "4")
	if len(s.history) != 6 || s.history[0].Content != "one" {
		t.Fatalf("a request must not share the history: %+v", s.history)
	}
	for _, mode := range []string{"moa", "speed", "concise"} {
		s.mode, s.model = mode, "tiny"
		if r := s.request("x"); r.Mode != mode || r.Model != "" {
			t.Errorf("mode %s: request mode %q model %q", mode, r.Mode, r.Model)
		}
	}
	s.mode = "pipeline"
	if r := s.request("x"); r.Mode != "pipeline" || r.Model != "tiny" {
		t.Errorf("mode pipeline: request mode %q model %q", r.Mode, r.Model)
	}
	s.do(context.Background(), chatCommand{name: "reset"}, nil)
	if r := s.request("again"); len(r.History) != 0 {
		t.Fatalf("after /reset: %+v", r.History)
	}
}

// TestSeedArg: --seed takes every seed X-Swarm-Seed prints, 2^63 and
// above included, and sends its exact digits.
func TestSeedArg(t *testing.T) {
	for _, in := range []string{"0", "9223372036854775808", "12174805838150342771", "18446744073709551615"} {
		sd, err := seedArg(true, in)
		if err != nil {
			t.Fatalf("--seed %s: %v", in, err)
		}
		b, err := json.Marshal(client.QueryRequest{Query: "hi", Seed: sd})
		if err != nil || !strings.Contains(string(b), `"seed":`+in+`}`) {
			t.Fatalf("--seed %s sent as %s (%v)", in, b, err)
		}
	}
	if sd, err := seedArg(false, ""); sd != nil || err != nil {
		t.Fatalf("no --seed: %v %v", sd, err)
	}
}

// TestChatSummary: a traced turn's last line counts the messages sent
// (grammatically) and the tokens of whoever wrote the final answer.
func TestChatSummary(t *testing.T) {
	one := client.QueryRequest{Query: "q", Mode: "concise"}
	three := client.QueryRequest{Query: "q", Mode: "moa", History: make([]client.Message, 2)}
	agents := []answer.Agent{{Role: "reasoner", Content: "a", Prompt: 30, Tokens: 5}, {Role: "concise", Content: "b", Prompt: 20, Tokens: 4}}
	cases := []struct {
		name string
		req  client.QueryRequest
		res  answer.Result
		want string
	}{
		{"one agent", one, answer.Result{Mode: "concise", FinalAnswer: "b", AgentResponses: agents[1:]},
			"— concise: 1 message sent, 20 prompt + 4 generated tokens, 1.5s"},
		{"aggregated", three, answer.Result{Mode: "moa", FinalAnswer: "c", AgentResponses: agents,
			Aggregator: &answer.Agent{Content: "c", Prompt: 90, Tokens: 6}},
			"— moa: 3 messages sent, 90 prompt + 6 generated tokens, 1.5s"},
		{"failed aggregator: the agent's answer", three, answer.Result{Mode: "moa", FinalAnswer: "a", AgentResponses: agents,
			Aggregator: &answer.Agent{Error: "busy"}},
			"— moa: 3 messages sent, 30 prompt + 5 generated tokens, 1.5s"},
		{"pipeline", one, answer.Result{Mode: "pipeline", FinalAnswer: "x",
			Pipeline: &answer.Pipeline{Model: "tiny", Tokens: []int32{1, 2, 3}, PromptTokens: 11}},
			"— concise: 1 message sent, 11 prompt + 3 generated tokens, 1.5s"},
		{"nobody wrote it", one, answer.Result{Mode: "concise", FinalAnswer: "?", AgentResponses: agents},
			"— concise: 1 message sent, 1.5s"},
	}
	for _, c := range cases {
		if got := chatSummary(c.req, &c.res, 1500*time.Millisecond); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestChatLoop runs the loop on piped input: commands act, a question the
// daemon cannot answer (none runs) is reported and left out of the
// history, and the chat goes on to /quit.
func TestChatLoop(t *testing.T) {
	var out, errb bytes.Buffer
	in := "/help\n/mode moa\n/trace on\n/bogus\nhello?\n/mode speed\n/quit\nnever read\n"
	e := &env{stdin: strings.NewReader(in), stdout: &out, stderr: &errb, api: deadAddr(t), interrupt: make(chan os.Signal)}
	t.Setenv("SWARM_API", e.api)
	t.Setenv("SWARM_API_TOKEN", "")
	code := run(context.Background(), e, []string{"chat"})
	errs := errb.String()
	for _, want := range []string{"/mode auto|moa|speed|pipeline", "(mode moa)", "(trace on)", "unknown command /bogus",
		"swarmd is not running", "(mode speed)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if code != 0 || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, out.String())
	}
}

// TestChatEOF: the end of input ends the chat with exit 0.
func TestChatEOF(t *testing.T) {
	in := "/reset\n"
	code, _, errs := ctl(t, &in, "chat", "--api", deadAddr(t))
	if code != 0 || !strings.Contains(errs, "(conversation forgotten)") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

func TestChatUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"chat", "hi"}, `chat takes no arguments, got "hi"`},
		{[]string{"chat", "--mode", "Fast!"}, `--mode "Fast!"`},
		{[]string{"chat", "--mode", "bogus"}, `--mode "bogus": want auto, moa, speed, pipeline or a role (reasoner,`},
		{[]string{"chat", "--max-tokens", "0"}, "--max-tokens 0"},
		{[]string{"chat", "--temperature", "3"}, "--temperature 3"},
		{[]string{"chat", "--seed", "-1"}, "--seed -1"},
		{[]string{"chat", "--json"}, "chat is interactive"},
	} {
		code, _, errs := ctl(t, nil, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("swarmctl %q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

func TestChatDegraded(t *testing.T) {
	ok := &answer.Result{Mode: "moa", AgentResponses: []answer.Agent{{Role: "writer"}}}
	cases := map[string]struct {
		res  *answer.Result
		want bool
	}{
		"all well":   {ok, false},
		"failed":     {&answer.Result{Mode: "moa", FailedAgents: []answer.Agent{{Role: "critic", Error: "busy"}}}, true},
		"unverified": {&answer.Result{Mode: "moa", AgentResponses: []answer.Agent{{Role: "writer", Unverified: true}}}, true},
		"partial":    {&answer.Result{Mode: "speed", AgentResponses: []answer.Agent{{Role: "drafter", Partial: true}}}, true},
		"pipeline":   {&answer.Result{Mode: "pipeline"}, false},
	}
	for name, tc := range cases {
		if got := degraded(tc.res); got != tc.want {
			t.Errorf("%s: degraded = %v, want %v", name, got, tc.want)
		}
	}
}
