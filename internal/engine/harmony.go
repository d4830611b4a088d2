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

// harmonyNext is Next for a harmony vocabulary: only the text of messages
// on the final channel (or on none named) is shown; the analysis and
// commentary channels, roles and channel names are not.
func (d *StreamDecoder) harmonyNext(h *harmonyTokens, id int32) (string, error) {
	switch id {
	case h.start:
		d.state = harmonyHeader
		return "", nil
	case h.channel:
		d.state = harmonyChannel
		d.channel.Reset()
		return "", nil
	case h.message:
		name, _, _ := strings.Cut(strings.TrimSpace(d.channel.String()), " ")
		d.shown = name == "" || name == "final"
		d.channel.Reset()
		d.state = harmonyText
		return "", nil
	case h.end:
		d.state = harmonyBetween
		return "", nil
	}
	if d.t.IsControl(id) {
		return "", nil
	}
	s, err := d.Add(id)
	switch {
	case d.state == harmonyChannel:
		d.channel.WriteString(s)
	case d.state == harmonyText && d.shown:
		return s, err
	}
	return "", err
}
