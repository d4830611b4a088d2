package engine

import (
	"strings"

	"github.com/ollama/ollama/tokenizer"
)

// harmonyTokens are the control tokens of OpenAI's harmony format (GPT-OSS):
// an answer is a run of messages, each <|start|>ROLE<|channel|>NAME
// <|message|>TEXT<|end|>, the last one <|return|>-ended; the "analysis"
// channel holds the model's reasoning, the "final" one its answer.
type harmonyTokens struct {
	start, channel, message, end int32
}

// findHarmony returns the vocabulary's harmony tokens, nil when it lacks
// any of them (every other format).
func findHarmony(v *tokenizer.Vocabulary) *harmonyTokens {
	ids := make([]int32, 4)
	for i, name := range []string{"<|start|>", "<|channel|>", "<|message|>", "<|end|>"} {
		id := v.Encode(name)
		if id < 0 || v.Types[id] != tokenizer.TOKEN_TYPE_CONTROL {
			return nil
		}
		ids[i] = id
	}
	return &harmonyTokens{start: ids[0], channel: ids[1], message: ids[2], end: ids[3]}
}

// harmony states of a chat decoder: in a message's header (role, channel
// name: not shown), in its text, or between messages.
const (
	harmonyHeader = iota
	harmonyChannel
	harmonyText
	harmonyBetween
)

// harmonyNext is Step for a harmony vocabulary: the text of messages on
// the final channel (or on none named) is the answer, that of messages on
// the analysis channel the reasoning; the commentary channel (tool calls),
// roles and channel names are neither.
func (d *StreamDecoder) harmonyNext(h *harmonyTokens, id int32) (text, reasoning string, err error) {
	switch id {
	case h.start:
		d.state = harmonyHeader
		return "", "", nil
	case h.channel:
		d.state = harmonyChannel
		d.channel.Reset()
		return "", "", nil
	case h.message:
		name, _, _ := strings.Cut(strings.TrimSpace(d.channel.String()), " ")
		d.shown = name == "" || name == "final"
		d.thought = name == "analysis"
		d.channel.Reset()
		d.state = harmonyText
		return "", "", nil
	case h.end:
		// Bytes of a character the message did not finish are its own:
		// the next message's text does not begin with them.
		rest := d.Flush()
		if d.state == harmonyText {
			text, reasoning = d.route(rest)
		}
		d.state = harmonyBetween
		return text, reasoning, nil
	}
	if d.t.IsControl(id) {
		return "", "", nil
	}
	s, err := d.Add(id)
	switch d.state {
	case harmonyChannel:
		d.channel.WriteString(s)
	case harmonyText:
		text, reasoning = d.route(s)
	}
	return text, reasoning, err
}

// route returns s as the answer's text or as reasoning, as the current
// message's channel says (or as neither).
func (d *StreamDecoder) route(s string) (text, reasoning string) {
	switch {
	case d.shown:
		return s, ""
	case d.thought:
		return "", s
	}
	return "", ""
}
