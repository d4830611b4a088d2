package moa

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRequestValidate(t *testing.T) {
	ok := func() *Request {
		return &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 10}
	}
	cases := []struct {
		name string
		edit func(r *Request)
	}{
		{"unknown role", func(r *Request) { r.Role = "poet" }},
		{"no messages", func(r *Request) { r.Messages = nil }},
		{"bad message role", func(r *Request) { r.Messages[0].Role = "robot" }},
		{"too much text", func(r *Request) { r.Messages[0].Content = strings.Repeat("x", maxTextBytes+1) }},
		{"negative max tokens", func(r *Request) { r.MaxTokens = -1 }},
		{"huge max tokens", func(r *Request) { r.MaxTokens = maxGenTokens + 1 }},
		{"negative deadline", func(r *Request) { r.DeadlineMS = -5 }},
		{"temperature", func(r *Request) { r.Sampling.Temperature = 50 }},
		{"top_p", func(r *Request) { r.Sampling.TopP = 1.5 }},
	}
	if err := ok().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		r := ok()
		tc.edit(r)
		if err := r.Validate(); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err = %v, want ErrBadRequest", tc.name, err)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	req := &Request{Role: Critic, Messages: []Message{{Role: "user", Content: "why?"}}, MaxTokens: 5, DeadlineMS: 100}
	if err := writeFrame(&buf, req); err != nil {
		t.Fatal(err)
	}
	for _, rep := range []*Reply{{Type: ReplyToken, Text: "a"}, {Type: ReplyDone, Done: &Done{Tokens: 1}},
		{Type: ReplyError, Error: &WireError{Code: CodeBusy, Message: "busy"}}} {
		if err := writeFrame(&buf, rep); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	got, err := DecodeRequest(r)
	if err != nil || got.Role != Critic || got.DeadlineMS != 100 {
		t.Fatalf("request: %+v, %v", got, err)
	}
	for _, want := range []string{ReplyToken, ReplyDone, ReplyError} {
		rep, err := DecodeReply(r)
		if err != nil || rep.Type != want {
			t.Fatalf("reply: %+v, %v (want %s)", rep, err, want)
		}
	}
}

func TestFrameErrors(t *testing.T) {
	frame := func(s string) []byte {
		var b bytes.Buffer
		b.WriteByte(byte(len(s)))
		b.WriteString(s)
		return b.Bytes()
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"zero length", []byte{0}},
		{"oversize length", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"truncated", []byte{10, '{'}},
		{"not json", frame("hello")},
		{"unknown field", frame(`{"type":"token","x":1}`)},
		{"unknown type", frame(`{"type":"shout"}`)},
		{"done without metrics", frame(`{"type":"done"}`)},
		{"error without code", frame(`{"type":"error","error":{}}`)},
		{"trailing data", frame(`{"type":"token"}{}`)},
		{"done with reasoning", frame(`{"type":"done","reasoning":"x","done":{}}`)},
		{"error with reasoning", frame(`{"type":"error","reasoning":"x","error":{"code":"busy"}}`)},
	}
	for _, tc := range cases {
		if _, err := DecodeReply(bufio.NewReader(bytes.NewReader(tc.in))); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err = %v, want ErrProtocol", tc.name, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, &Request{Role: Writer, Messages: []Message{{Role: "user", Content: "x"}}})
	f.Add(b.Bytes())
	f.Add([]byte{3, '{', '}', 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := DecodeRequest(bufio.NewReader(bytes.NewReader(in)))
		if err == nil {
			if err := req.Validate(); err != nil {
				t.Fatalf("decoded an invalid request: %v", err)
			}
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, &Reply{Type: ReplyDone, Done: &Done{Tokens: 3}})
	f.Add(b.Bytes())
	b.Reset()
	writeFrame(&b, &Reply{Type: ReplyToken, Reasoning: "hmm"})
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for i := 0; i < 4; i++ {
			rep, err := DecodeReply(r)
			if err != nil {
				return
			}
			if rep.validate() != nil {
				t.Fatal("decoded an invalid reply")
			}
		}
	})
}
