package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ollama/ollama/fs"
	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/models/deepseek2"
	"github.com/ollama/ollama/model/models/gemma2"
	"github.com/ollama/ollama/model/models/gemma3"
	"github.com/ollama/ollama/model/models/gemma3n"
	"github.com/ollama/ollama/model/models/glm4moelite"
	"github.com/ollama/ollama/model/models/gptoss"
	"github.com/ollama/ollama/model/models/lfm2"
	"github.com/ollama/ollama/model/models/llama"
	"github.com/ollama/ollama/model/models/llama4"
	"github.com/ollama/ollama/model/models/mistral3"
	"github.com/ollama/ollama/model/models/nemotronh"
	"github.com/ollama/ollama/model/models/olmo3"
	"github.com/ollama/ollama/model/models/qwen2"
	"github.com/ollama/ollama/model/models/qwen3"
	"github.com/ollama/ollama/model/models/qwen3next"
	"github.com/ollama/ollama/tokenizer"
)

// eogNames are end-of-generation tokens recognised by name in addition to the
// GGUF's eos_token_id(s).
var eogNames = []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<|end|>"}

// Tokenizer turns text into token ids and back, renders chat templates and
// knows the end-of-generation tokens. It needs only GGUF metadata (every
// stage slice keeps it), not weights. It is safe for concurrent use.
type Tokenizer struct {
	t      tokenizer.Tokenizer
	vocab  *tokenizer.Vocabulary
	eog    map[int32]bool
	format ChatFormat
	qwen25 bool          // Qwen2.5 template: default system prompt
	tmpl   *chatTemplate // the file's own template, when it renders
	chat   ChatTemplateInfo
	fp     string // Fingerprint

	harmony *harmonyTokens // GPT-OSS's message format; nil for the others
	arch    string         // the model's general.architecture
}

// LoadTokenizer reads only the metadata of a GGUF (whole model or any stage
// slice) and returns its tokenizer, without loading weights.
func LoadTokenizer(path string) (t *Tokenizer, err error) {
	meta, err := checkFile(path, true)
	if err != nil {
		return nil, err
	}
	defer recoverErr(&err, "reading tokenizer")
	kv := meta.KV()
	var m model.Model
	switch kv.Architecture() {
	case "qwen3", "qwen3moe":
		m, err = qwen3.New(kv)
	case "qwen2":
		m, err = qwen2.New(kv)
	case "llama":
		m, err = llama.New(kv)
	case "gemma3":
		m, err = gemma3.New(kv)
	case "gemma2":
		m, err = gemma2.New(kv)
	case "gemma3n":
		m, err = gemma3n.New(kv)
	case "olmo3":
		m, err = olmo3.New(kv)
	case "deepseek2":
		m, err = deepseek2.New(kv)
	case "glm4moelite":
		m, err = glm4moelite.New(kv)
	case "mistral3":
		m, err = mistral3.New(kv)
	case "llama4":
		m, err = llama4.New(kv)
	case "lfm2", "lfm2moe":
		m, err = lfm2.New(kv)
	case "gptoss", "gpt-oss":
		m, err = gptoss.New(kv)
	case "qwen3next":
		m, err = qwen3next.New(kv)
	case "nemotron_h", "nemotron_h_moe":
		m, err = nemotronh.New(kv)
	default:
		err = fmt.Errorf("%w %q", ErrUnsupportedArch, kv.Architecture())
	}
	if err != nil {
		return nil, &FileError{path, err}
	}
	t, err = newTokenizer(m, kv)
	if err != nil {
		return nil, &FileError{path, err}
	}
	return t, nil
}

// checkVocab refuses a vocabulary ollama's tokenizers would index past
// (they panic): token types and, for a SentencePiece vocabulary (Gemma's,
// and Llama files that say tokenizer.ggml.model "llama"), scores, one per
// token, and at least the five tokens its constructor reads.
func checkVocab(kv fsggml.KV) error {
	n := len(kv.Strings("tokenizer.ggml.tokens"))
	if types := len(kv.Ints("tokenizer.ggml.token_type")); n < 5 || types != n {
		return fmt.Errorf("%w: tokenizer.ggml.tokens has %d entries and tokenizer.ggml.token_type %d (one per token, 5 or more)", ErrNotGGUF, n, types)
	}
	arch := kv.Architecture()
	spm := arch == "gemma2" || arch == "gemma3" || arch == "gemma3n" || arch == "llama" && kv.String("tokenizer.ggml.model") == "llama"
	if scores := len(kv.Floats("tokenizer.ggml.scores")); spm && scores != n {
		return fmt.Errorf("%w: tokenizer.ggml.scores has %d entries for %d tokens (%s reads a SentencePiece vocabulary: one score per token)", ErrNotGGUF, scores, n, arch)
	}
	return nil
}

func newTokenizer(m any, cfg fs.Config) (*Tokenizer, error) {
	tt, ok := m.(tokenizer.Tokenizer)
	if !ok {
		return nil, fmt.Errorf("%w: model %T has no tokenizer", ErrUnsupportedArch, m)
	}
	v := tt.Vocabulary()
	if len(v.Values) == 0 || len(v.Types) != len(v.Values) {
		return nil, fmt.Errorf("%w: tokenizer has %d tokens and %d token types", ErrBadInput, len(v.Values), len(v.Types))
	}
	t := &Tokenizer{t: tt, vocab: v, eog: map[int32]bool{}, harmony: findHarmony(v)}
	for _, id := range v.EOS {
		if id >= 0 && int(id) < len(v.Values) {
			t.eog[id] = true
		}
	}
	for _, name := range eogNames {
		if id := v.Encode(name); id >= 0 && v.Types[id] == tokenizer.TOKEN_TYPE_CONTROL {
			t.eog[id] = true
		}
	}
	if t.harmony != nil {
		// <|end|> ends one message of a harmony answer (the reasoning),
		// not the answer: <|return|> and <|call|> do.
		delete(t.eog, t.harmony.end)
	}
	t.format, t.qwen25 = detectChatFormat(cfg.String("tokenizer.chat_template"))
	t.chooseTemplate(cfg.String("tokenizer.chat_template"))
	t.fp = fingerprint(v, t.eog)
	t.arch = cfg.Architecture()
	return t, nil
}

// Arch is the general.architecture of the model the tokenizer was read
// from: what an originator, which holds no weights, knows of the model
// its route runs (Rewinds).
func (t *Tokenizer) Arch() string { return t.arch }

// Fingerprint names the tokenizer's token ids: two models with the same
// fingerprint give every id the same text, type and end-of-generation
// meaning, so one can draft for the other. 32 hex digits of SHA-256.
func (t *Tokenizer) Fingerprint() string { return t.fp }

func fingerprint(v *tokenizer.Vocabulary, eog map[int32]bool) string {
	h := sha256.New()
	var b [8]byte
	for i, s := range v.Values {
		binary.LittleEndian.PutUint32(b[:], uint32(len(s)))
		binary.LittleEndian.PutUint32(b[4:], uint32(v.Types[i]))
		if eog[int32(i)] {
			b[7] |= 0x80
		}
		h.Write(b[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.vocab.Values) }

// Encode tokenizes s. Special tokens written in s (like <|im_start|>) become
// their ids. addSpecial adds BOS/EOS as the GGUF asks.
func (t *Tokenizer) Encode(s string, addSpecial bool) (ids []int32, err error) {
	defer recoverErr(&err, "encoding")
	return t.t.Encode(s, addSpecial)
}

// Decode turns ids back into text. Ids outside the vocabulary are an error.
func (t *Tokenizer) Decode(ids []int32) (s string, err error) {
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.vocab.Values) {
			return "", fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrBadInput, id, len(t.vocab.Values))
		}
	}
	defer recoverErr(&err, "decoding")
	return t.t.Decode(ids)
}

// Token returns the text of one token as stored in the vocabulary (byte-level
// BPE form), or "" for an id outside it.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.vocab.Values) {
		return ""
	}
	return t.vocab.Values[id]
}

// ID returns the id of a token by its vocabulary text, or -1.
func (t *Tokenizer) ID(token string) int32 { return t.vocab.Encode(token) }

// IsEOG reports whether id ends generation.
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOG returns the end-of-generation token ids.
func (t *Tokenizer) EOG() []int32 {
	out := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		out = append(out, id)
	}
	return out
}

// IsControl reports whether id is a control (special) token, which streaming
// output does not show.
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.vocab.Types) && t.vocab.Types[id] == tokenizer.TOKEN_TYPE_CONTROL
}

// ChatFormat is the chat format the template was recognised as.
func (t *Tokenizer) ChatFormat() ChatFormat { return t.format }

// NewStreamDecoder returns a decoder for streaming tokens as text.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// NewChatDecoder returns a decoder for a chat answer: as NewStreamDecoder,
// and where the model writes the harmony format (GPT-OSS) the final
// channel's text is the answer and the analysis channel's the reasoning,
// apart from it (Step). The answer begins in a message header, as the chat
// template's generation prompt leaves it (<|start|>assistant).
func (t *Tokenizer) NewChatDecoder() *StreamDecoder { return &StreamDecoder{t: t, chat: true} }

// StreamDecoder turns a stream of token ids into text pieces that never split
// a UTF-8 character (byte-level BPE tokens can end mid-character).
type StreamDecoder struct {
	t   *Tokenizer
	buf []byte

	chat    bool            // a chat answer: harmony channels apply
	state   int             // harmony: where in a message the answer is
	channel strings.Builder // harmony: the channel name being read
	shown   bool            // harmony: this message's text is the answer
	thought bool            // harmony: this message's text is reasoning
}

// Next decodes any generated token as Step does and returns the answer's
// text alone.
func (d *StreamDecoder) Next(id int32) (string, error) {
	text, _, err := d.Step(id)
	return text, err
}

// Step decodes any generated token: control tokens give no text (harmony's
// steer where the text goes, NewChatDecoder), others as Add. A chat
// decoder returns the model's reasoning (harmony's analysis channel) as
// reasoning, never as text; every other decoder returns text alone.
func (d *StreamDecoder) Step(id int32) (text, reasoning string, err error) {
	if h := d.t.harmony; h != nil && d.chat {
		return d.harmonyNext(h, id)
	}
	if d.t.IsControl(id) {
		return "", "", nil
	}
	text, err = d.Add(id)
	return text, "", err
}

// FlushStep is Flush for a decoder used through Step: the bytes left
// belong to the answer's text or to its reasoning, as the message they
// came from.
func (d *StreamDecoder) FlushStep() (text, reasoning string) {
	rest := d.Flush()
	if d.t.harmony != nil && d.chat {
		if d.state != harmonyText {
			return "", ""
		}
		return d.route(rest)
	}
	return rest, ""
}

// Add decodes id and returns the text that is now complete (maybe "").
func (d *StreamDecoder) Add(id int32) (string, error) {
	s, err := d.t.Decode([]int32{id})
	if err != nil {
		return "", err
	}
	d.buf = append(d.buf, s...)
	k := completeUTF8(d.buf)
	out := string(d.buf[:k])
	d.buf = append(d.buf[:0], d.buf[k:]...)
	return out, nil
}

// Flush returns whatever bytes remain, even an incomplete character.
func (d *StreamDecoder) Flush() string {
	s := string(d.buf)
	d.buf = d.buf[:0]
	return s
}

// completeUTF8 returns the length of the longest prefix of b that does not end
// inside a multi-byte character that may still be completed.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}
