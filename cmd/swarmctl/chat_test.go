package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/node/client"
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

// TestChatHistory: each request carries every finished turn, then the new
// question; /reset forgets them; the mode picks the API's model field.
func TestChatHistory(t *testing.T) {
	s := &chatSession{mode: "auto"}
	r := s.request("one")
	if want := []chatMessage{{"user", "one"}}; !reflect.DeepEqual(r.Messages, want) || r.Model != "swarm" {
		t.Fatalf("first request %+v", r)
	}
	if !r.Stream {
		t.Fatal("an untraced answer is streamed")
	}
	if r.Temperature == nil || *r.Temperature != 0 {
		t.Fatalf("chat is greedy unless told otherwise, like ask: temperature %v", r.Temperature)
	}
	s.remember("one", "1")
	s.remember("two", "2")
	r = s.request("three")
	want := []chatMessage{{"user", "one"}, {"assistant", "1"}, {"user", "two"}, {"assistant", "2"}, {"user", "three"}}
	if !reflect.DeepEqual(r.Messages, want) {
		t.Fatalf("third request: %+v; want %+v", r.Messages, want)
	}
	if len(s.history) != 4 {
		t.Fatalf("a request must not change the history: %d messages", len(s.history))
	}
	for mode, model := range map[string]string{"moa": "swarm-moa", "speed": "swarm-speed", "concise": "concise"} {
		s.mode = mode
		if got := s.request("x").Model; got != model {
			t.Errorf("mode %s: model %q, want %q", mode, got, model)
		}
	}
	s.mode, s.model = "pipeline", "tiny"
	if got := s.request("x").Model; got != "tiny" {
		t.Errorf("mode pipeline: model %q", got)
	}
	s.trace = true
	if s.request("x").Stream {
		t.Error("a traced answer comes whole, with the swarm's result")
	}
	s.e = &env{stderr: new(bytes.Buffer)}
	s.do(context.Background(), chatCommand{name: "reset"}, nil)
	if r := s.request("again"); len(r.Messages) != 1 {
		t.Fatalf("after /reset: %+v", r.Messages)
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

// TestChatStream decodes the chat API's event stream as swarmd writes it.
func TestChatStream(t *testing.T) {
	ok := `: agent concise done

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}

data: [DONE]

`
	var texts []string
	st := &chatStream{onText: func(s string) { texts = append(texts, s) }}
	if err := st.read(strings.NewReader(ok), "x"); err != nil {
		t.Fatal(err)
	}
	if st.answer.String() != "Hello" || len(texts) != 2 || st.finish != "stop" || st.usage == nil || st.usage.Prompt != 12 {
		t.Fatalf("decoded %q %q %q %+v", st.answer.String(), texts, st.finish, st.usage)
	}
	failed := `data: {"error":{"message":"no agent answered","type":"no_agents","status":503}}

data: [DONE]

`
	var ae *client.APIError
	err := (&chatStream{}).read(strings.NewReader(failed), "x")
	if !errors.As(err, &ae) || !ae.Streamed || ae.Status != 503 || !strings.Contains(err.Error(), "no agent answered") ||
		strings.Contains(err.Error(), "HTTP") {
		t.Fatalf("streamed error: %v", err)
	}
	for name, bad := range map[string]string{
		"cut off":      "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		"no finish":    "data: [DONE]\n\n",
		"garbage":      "data: {nope\n\n",
		"empty stream": "",
	} {
		if err := (&chatStream{}).read(strings.NewReader(bad), "x"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzChatStream: any byte stream gives an answer or an error, never a
// crash.
func FuzzChatStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": note\n\ndata: {\"error\":{\"message\":\"m\"}}\n\n"))
	f.Add([]byte("data: {\"usage\":null,\"choices\":null}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st := &chatStream{onText: func(string) {}}
		if err := st.read(bytes.NewReader(b), "x"); err == nil && st.finish == "" {
			t.Fatal("a stream without a finish reason was accepted")
		}
	})
}

// TestChatWhole decodes an unstreamed chat answer, the swarm's result
// included, and refuses one without it.
func TestChatWhole(t *testing.T) {
	ok := `{"id":"c","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Paris"}}],
"usage":{"prompt_tokens":20,"completion_tokens":1,"total_tokens":21},
"swarm":{"query":"q","mode":"moa","final_answer":"Paris","agent_responses":[{"role":"concise","peer":"p","content":"Paris"}]}}`
	st := &chatStream{}
	if err := st.readWhole(strings.NewReader(ok), "x"); err != nil {
		t.Fatal(err)
	}
	if st.answer.String() != "Paris" || st.finish != "stop" || st.usage.Prompt != 20 || st.swarm == nil ||
		st.swarm.Mode != "moa" || len(st.swarm.AgentResponses) != 1 {
		t.Fatalf("decoded %q %q %+v %+v", st.answer.String(), st.finish, st.usage, st.swarm)
	}
	for name, bad := range map[string]string{
		"no swarm result": `{"choices":[{"message":{"content":"a"},"finish_reason":"stop"}]}`,
		"no choices":      `{"choices":[],"swarm":{}}`,
		"garbage":         `{"choices":`,
	} {
		if err := (&chatStream{}).readWhole(strings.NewReader(bad), "x"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
