package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"
)

// The GGUF's own tokenizer.chat_template is a Jinja program written by the
// model's authors (or by whoever made the file: a peer's input). It is
// rendered with github.com/ardanlabs/jinja, a Go Jinja built for chat
// templates, under bounds that make a bad template an error, never a hang
// or a crash: the source's size, the depth and count of macro calls (a
// runaway recursion would overflow the goroutine's stack, which Go cannot
// recover), the items range() makes, the output's size and the time.
// ollama's own template package was not used: it does not run Jinja, it
// maps a file's template to the nearest of its ~20 hand-written Go
// templates (template.Named), and its per-family renderers cover only the
// families ollama ships.
const (
	maxTemplateBytes  = 256 << 10
	maxTemplateOutput = 4 << 20
	maxMacroDepth     = 64
	maxMacroCalls     = 100_000
	maxRangeItems     = 100_000
)

// templateTimeout bounds a render (a variable: tests of the other bounds
// raise it, since under the race detector on a loaded machine 100k macro
// calls take longer).
var templateTimeout = 2 * time.Second

// clock is the time strftime_now reads (tests fix it).
var clock = time.Now

// ChatTemplateError is a chat template that the engine could not use, or
// that refused a conversation (raise_exception). It matches
// ErrChatTemplate.
type ChatTemplateError struct {
	// Raised is true when the template itself refused the conversation
	// (raise_exception): the conversation is at fault, not the template.
	Raised bool
	Err    error
}

func (e *ChatTemplateError) Error() string {
	if e.Raised {
		return fmt.Sprintf("%v: the model's template refused the conversation: %v", ErrChatTemplate, e.Err)
	}
	return fmt.Sprintf("%v: %v", ErrChatTemplate, e.Err)
}

func (e *ChatTemplateError) Unwrap() []error { return []error{ErrChatTemplate, e.Err} }

// chatTemplate is a compiled tokenizer.chat_template.
type chatTemplate struct {
	t        *jinja.Template
	bos, eos string
}

var (
	macroOpen  = regexp.MustCompile(`\{%([-+]?)\s*macro\s[^%]*?([-+]?)%\}`)
	macroClose = regexp.MustCompile(`\{%([-+]?)\s*endmacro\s*([-+]?)%\}`)
)

// compileTemplate compiles src with every macro's body wrapped in calls
// that count its depth: the library has no limit of its own. The calls sit
// in block tags that keep the whitespace control of the tags beside them,
// so the output is the template's.
func compileTemplate(src, bos, eos string) (*chatTemplate, error) {
	if len(src) > maxTemplateBytes {
		return nil, &ChatTemplateError{Err: fmt.Errorf("template of %d bytes, at most %d", len(src), maxTemplateBytes)}
	}
	src = macroOpen.ReplaceAllString(src, "$0{% set __swarm_in = __swarm_enter() $2%}")
	src = macroClose.ReplaceAllString(src, "{%$1 set __swarm_out = __swarm_leave() %}$0")
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, &ChatTemplateError{Err: err}
	}
	return &chatTemplate{t: t, bos: bos, eos: eos}, nil
}

// render runs the template over msgs. The bounds' callbacks stop a runaway
// render; the timeout answers the caller even if the library were to loop
// where no callback runs (that goroutine then ends on its own).
func (c *chatTemplate) render(msgs []Message, opts ChatOptions) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	var stop atomic.Bool
	var depth, calls, items int
	var raised string
	budget := func() error {
		if stop.Load() {
			return errors.New("render stopped: over time")
		}
		return nil
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(!opts.NoGenerationPrompt),
		"bos_token":             jinja.NewString(c.bos),
		"eos_token":             jinja.NewString(c.eos),
		"__swarm_enter": jinja.NewCallable("macro", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
			depth++
			calls++
			switch {
			case depth > maxMacroDepth:
				return jinja.Undefined(), fmt.Errorf("macros nested deeper than %d", maxMacroDepth)
			case calls > maxMacroCalls:
				return jinja.Undefined(), fmt.Errorf("more than %d macro calls", maxMacroCalls)
			}
			return jinja.NewString(""), budget()
		}),
		"__swarm_leave": jinja.NewCallable("macro", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
			depth--
			return jinja.NewString(""), nil
		}),
		"raise_exception": jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			raised = "raise_exception"
			if len(args) > 0 {
				raised = text(args[0])
			}
			return jinja.Undefined(), errors.New(raised)
		}),
		"range": jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			out, err := boundedRange(args, maxRangeItems-items)
			if err != nil {
				return jinja.Undefined(), err
			}
			items += len(out)
			return jinja.NewList(out), budget()
		}),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			f := "%Y-%m-%d"
			if len(args) > 0 {
				f = text(args[0])
			}
			return jinja.NewString(strftime(clock(), f)), nil
		}),
	}
	if opts.Think != nil {
		data["enable_thinking"] = jinja.NewBool(*opts.Think)
	}
	type result struct {
		s   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("template crashed the renderer: %v", p)
			}
			done <- r
		}()
		r.s, r.err = c.t.RenderValues(data)
	}()
	timer := time.NewTimer(templateTimeout)
	defer timer.Stop()
	var r result
	select {
	case r = <-done:
	case <-timer.C:
		stop.Store(true)
		return "", &ChatTemplateError{Err: fmt.Errorf("render took over %v", templateTimeout)}
	}
	switch {
	case r.err != nil && raised != "":
		return "", &ChatTemplateError{Raised: true, Err: errors.New(raised)}
	case r.err != nil:
		return "", &ChatTemplateError{Err: r.err}
	case len(r.s) > maxTemplateOutput:
		return "", &ChatTemplateError{Err: fmt.Errorf("rendered prompt of %d bytes, at most %d", len(r.s), maxTemplateOutput)}
	}
	return r.s, nil
}

// text is a string value's text, any other value's printed form.
func text(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// boundedRange is Jinja's range(stop), range(start, stop[, step]) making
// at most limit items.
func boundedRange(args []jinja.Value, limit int) ([]jinja.Value, error) {
	var n [3]int64
	for i, a := range args {
		if i >= 3 || !a.IsInt() {
			return nil, errors.New("range: want 1 to 3 integers")
		}
		n[i] = a.AsInt()
	}
	start, stop, step := int64(0), n[0], int64(1)
	switch len(args) {
	case 0:
		return nil, errors.New("range: want 1 to 3 integers")
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	}
	if step == 0 {
		return nil, errors.New("range: step is zero")
	}
	var count int64
	switch {
	case step > 0 && stop > start:
		count = (stop-start-1)/step + 1
	case step < 0 && stop < start:
		count = (start-stop-1)/-step + 1
	}
	if count < 0 || count > int64(limit) { // < 0: the subtraction overflowed
		return nil, fmt.Errorf("range: more than %d items in one render", maxRangeItems)
	}
	out := make([]jinja.Value, 0, count)
	for i := int64(0); i < count; i++ {
		out = append(out, jinja.NewInt(start+i*step))
	}
	return out, nil
}

// strftime formats t with Python's strftime directives that chat templates
// use (Llama 3's and GPT-OSS's date lines).
func strftime(t time.Time, f string) string {
	var sb strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			sb.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			sb.WriteString(t.Format("2006"))
		case 'y':
			sb.WriteString(t.Format("06"))
		case 'm':
			sb.WriteString(t.Format("01"))
		case 'd':
			sb.WriteString(t.Format("02"))
		case 'e':
			sb.WriteString(t.Format("_2"))
		case 'b':
			sb.WriteString(t.Format("Jan"))
		case 'B':
			sb.WriteString(t.Format("January"))
		case 'a':
			sb.WriteString(t.Format("Mon"))
		case 'A':
			sb.WriteString(t.Format("Monday"))
		case 'H':
			sb.WriteString(t.Format("15"))
		case 'I':
			sb.WriteString(t.Format("03"))
		case 'M':
			sb.WriteString(t.Format("04"))
		case 'S':
			sb.WriteString(t.Format("05"))
		case 'p':
			sb.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&sb, "%03d", t.YearDay())
		case '%':
			sb.WriteByte('%')
		default:
			sb.WriteByte('%')
			sb.WriteByte(f[i])
		}
	}
	return sb.String()
}
