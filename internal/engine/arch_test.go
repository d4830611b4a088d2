package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// archTable names every architecture the engine runs, so that one dropped
// from Architectures fails here instead of leaving the tests that range
// over it.
var archTable = []string{"qwen3", "qwen2", "llama", "gemma3", "mistral3", "lfm2", "qwen3moe", "gptoss", "gpt-oss", "gemma2", "olmo3", "deepseek2", "glm4moelite", "llama4",
	"lfm2moe",
	"qwen3next", "gemma3n",
	"nemotron_h",
	"nemotron_h_moe"}

// unsliceable: the architectures whose stages run on whole files.
var unsliceable = sliceRefused

func TestArchitecturesListed(t *testing.T) {
	for _, a := range archTable {
		if !slices.Contains(Architectures, a) {
			t.Errorf("%s missing from Architectures %v", a, Architectures)
		}
		if len(SynthSizesFor(a)) == 0 {
			t.Errorf("%s has no synth shapes", a)
		}
	}
}

// TestSplitMatchesWholeQuantized: with quantized weights (q8_0 on tiny,
// q4_k on small), every 2-stage cut of every architecture, each stage its
// own sliced file (its own whole file where slices cannot load), gives the whole model's logits bit for bit over a
// prompt and 16 decode steps.
func TestSplitMatchesWholeQuantized(t *testing.T) {
	for _, arch := range archTable {
		for _, c := range []struct{ size, typ string }{{"tiny", "q8_0"}, {"small", "q4_k"}} {
			t.Run(arch+"-"+c.size+"-"+c.typ, func(t *testing.T) {
				full := synthFile(t, arch, c.size, c.typ)
				whole := loadT(t, full, Options{Slots: 2, Context: 256})
				want := wholeTrace(t, whole)
				if d := distinct(want.tokens); d < 4 {
					t.Fatalf("synthetic model decodes too few distinct tokens (%d): %v", d, want.tokens)
				}
				if WholeOnly(arch) != "" {
					refusesRanges(t, whole, full)
					return
				}
				n := whole.Info().Layers
				sliced := map[[2]int]*Model{}
				for _, ch := range chains(n, 2) {
					models := make([]*Model, len(ch))
					for i, st := range ch {
						if unsliceable[arch] != "" {
							models[i] = loadT(t, full, Options{Slots: 2, Context: 256})
							continue
						}
						if sliced[st] == nil {
							p := filepath.Join(t.TempDir(), fmt.Sprintf("%d-%d.gguf", st[0], st[1]))
							sliceFile(t, full, p, st[0], st[1])
							sliced[st] = loadT(t, p, Options{Slots: 2, Context: 256})
						}
						models[i] = sliced[st]
					}
					runChain(t, fmt.Sprintf("stages %v", ch), models, ch, want)
				}
			})
		}
	}
}

// TestGemma3Tokenizer: the synthetic Gemma 3 file has Gemma's
// SentencePiece vocabulary and chat template: text round-trips, BOS leads,
// a turn renders as Gemma's and <end_of_turn> and <eos> end generation.
func TestGemma3Tokenizer(t *testing.T) {
	tok, err := LoadTokenizer(synthFile(t, "gemma3", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	const text = "Hello world, the swarm: 42 (tokens)!"
	ids, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != 2 || tok.Token(2) != "<bos>" {
		t.Errorf("ids %v: want <bos> (2) first", ids)
	}
	back, err := tok.Decode(ids[1:])
	if err != nil || back != text {
		t.Errorf("decode: %q, %v; want %q", back, err, text)
	}
	// tiny's 512 tokens hold "▁x" pieces at most, small's 4096 pairs
	small, err := LoadTokenizer(synthFile(t, "gemma3", "small", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tok  *Tokenizer
		most int
	}{{tok, len(text) - 4}, {small, len(text) * 2 / 3}} {
		ids, err := c.tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := c.tok.Decode(ids); len(ids) > c.most || back != text {
			t.Errorf("vocabulary of %d: %d tokens for %d bytes (want at most %d), decoded %q, %v", c.tok.VocabSize(), len(ids), len(text), c.most, back, err)
		}
	}
	for _, name := range []string{"<eos>", "<end_of_turn>"} {
		if !tok.IsEOG(tok.ID(name)) {
			t.Errorf("%s does not end generation", name)
		}
	}
	if got := tok.ChatTemplate().Source; got != "gguf" {
		t.Errorf("chat template source %q, want gguf (%s)", got, tok.ChatTemplate().Note)
	}
	s, err := tok.RenderChat([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"; s != want {
		t.Errorf("chat rendered %q, want %q", s, want)
	}
	ids, err = tok.Encode(s, true)
	if err != nil {
		t.Fatal(err)
	}
	if ids[1] != tok.ID("<start_of_turn>") || !slices.Contains(ids, tok.ID("<end_of_turn>")) {
		t.Errorf("turn markers not single tokens: %v", ids)
	}
	// the real sizes' vocabularies (1b, 4b): exactly so many distinct pieces
	for _, n := range []int{262144, 262208} {
		v, err := buildSPMVocab(n)
		if err != nil || len(v.tokens) != n || len(v.ids) != n || len(v.scores) != n {
			t.Errorf("vocabulary of %d: %d tokens, %d distinct, %d scores, %v", n, len(v.tokens), len(v.ids), len(v.scores), err)
		}
	}
	if _, err := buildSPMVocab(300); err == nil {
		t.Error("a vocabulary of 300 accepted")
	}
}

// TestGemma3Truncate: a session of a model with sliding-window layers can
// be truncated by up to PrefillChunk positions behind its last step and
// continues bit for bit as before; further back is a clear error (the
// window's cells are gone), and truncating to 0 always works.
func TestGemma3Truncate(t *testing.T) {
	m := loadT(t, synthFile(t, "gemma3", "tiny", "f32"), Options{Slots: 2, Context: 256, PrefillChunk: 4})
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(400 + i)
	}
	run := func(from int) [][]float32 {
		var out [][]float32
		for i := from; i < len(prompt); i += 4 {
			l, err := s.RunRange(context.Background(), 0, m.Info().Layers, prompt[i:i+4], nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	want := run(0)
	// The last step ran positions 36-39: the cache keeps 8 (window) + 4
	// (PrefillChunk) positions behind 36.
	if err := s.Truncate(32); err != nil {
		t.Fatalf("truncate by 8: %v", err)
	}
	if got := run(32); !bitEqual(got[1], want[9]) {
		t.Errorf("after truncating to 32, logits differ (max |d| %g)", maxAbsDiff(got[1], want[9]))
	}
	err = s.Truncate(12)
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "sliding-window") {
		t.Fatalf("truncate by 28: %v, want a sliding-window error", err)
	}
	if s.Pos() != 40 {
		t.Errorf("a refused truncate moved the session to %d", s.Pos())
	}
	if err := s.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if got := run(0); !bitEqual(got[9], want[9]) {
		t.Errorf("after truncating to 0, logits differ (max |d| %g)", maxAbsDiff(got[9], want[9]))
	}
}

// TestMistral3Tokenizer: the synthetic Mistral 3 file's Tekken-style
// specials are single control tokens, </s> ends generation, and a
// conversation renders as Mistral 3's.
func TestMistral3Tokenizer(t *testing.T) {
	tok, err := LoadTokenizer(synthFile(t, "mistral3", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.ChatTemplate().Source; got != "gguf" {
		t.Errorf("chat template source %q, want gguf (%s)", got, tok.ChatTemplate().Note)
	}
	s, err := tok.RenderChat([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]"; s != want {
		t.Errorf("chat rendered %q, want %q", s, want)
	}
	ids, err := tok.Encode(s, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range []string{"<s>", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"} {
		if id := tok.ID(sp); !slices.Contains(ids, id) || !tok.IsControl(id) {
			t.Errorf("%s (id %d, control %v) not a token of %v", sp, id, tok.IsControl(id), ids)
		}
	}
	if ids[0] != tok.ID("<s>") || !tok.IsEOG(tok.ID("</s>")) {
		t.Errorf("ids %v: want <s> first and </s> ending generation", ids)
	}
	if back, err := tok.Decode(ids[1:]); err != nil || back != s {
		t.Errorf("decode: %q, %v; want %q", back, err, s)
	}
}

// TestLFM2Sessions: LFM2's sessions run isolated (its short convolution
// needs every sequence of a graph to bring as many positions), so
// sessions of different lengths stepping at once give each its logits
// alone; a recurrent state cannot go back but to position 0, and says so.
func TestLFM2Sessions(t *testing.T) {
	m := loadT(t, synthFile(t, "lfm2", "tiny", "f32"), Options{Slots: 3, Context: 256})
	if !m.Options().Isolated {
		t.Fatal("lfm2 sessions not isolated")
	}
	if NoRewind("lfm2") == "" || NoRewind(m.Tokenizer().Arch()) == "" || NoRewind("qwen3") != "" {
		t.Errorf("lfm2 said to rewind (tokenizer's arch %q), or qwen3 not", m.Tokenizer().Arch())
	}
	// head_count_kv is per layer: the estimate counts every layer at the most
	if kv, want := m.Memory().KVPerSession, int64(4*256*2*(16+16)*2); kv != want {
		t.Errorf("KV per session %d bytes, want %d", kv, want)
	}
	n := m.Info().Layers
	run := func(s *Session, prompt []int32) []float32 {
		l, err := s.RunRange(context.Background(), 0, n, prompt, nil)
		if err != nil {
			t.Error(err)
		}
		return l
	}
	prompts := [][]int32{splitPrompt, splitPrompt[:5], splitPrompt[:8]}
	alone := make([][]float32, len(prompts))
	sess := make([]*Session, len(prompts))
	for i := range sess {
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sess[i] = s
	}
	for i, p := range prompts {
		alone[i] = run(sess[i], p)
		if err := sess[i].Truncate(0); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the compute lock until the three steps are queued: a batching
	// model would run the first alone and the other two in one graph
	// (TestBatchedSameTokens).
	together := make([][]float32, len(prompts))
	done := make(chan int)
	q0 := m.queued.Load()
	computeMu.Lock()
	for i, p := range prompts {
		go func() { together[i] = run(sess[i], p); done <- i }()
	}
	waitQueued(t, m, q0+int64(len(prompts)))
	computeMu.Unlock()
	for range prompts {
		<-done
	}
	for i := range prompts {
		if !bitEqual(together[i], alone[i]) {
			t.Errorf("session %d: logits beside another differ from alone (max |d| %g)", i, maxAbsDiff(together[i], alone[i]))
		}
	}
	err := sess[0].Truncate(6)
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "recurrent state") {
		t.Errorf("truncate a recurrent state to 6: %v, want an error naming it", err)
	}
	if sess[0].Pos() != len(splitPrompt) {
		t.Errorf("a refused truncate moved the session to %d", sess[0].Pos())
	}
}

// TestGemma2LargeRefused: Gemma 2 27B (46 layers) scales its queries by a
// factor ollama sets inside its own forward pass; the engine refuses it
// naming why rather than run it with the other models' scaling.
func TestGemma2LargeRefused(t *testing.T) {
	shape := synthShapes["gemma2"]["tiny"]
	shape.layers = gemma2LargeLayers
	p := filepath.Join(t.TempDir(), "gemma2-46.gguf")
	if err := synthShaped(context.Background(), p, SynthSpec{Arch: "gemma2", Size: "tiny", Type: "f32"}, shape); err != nil {
		t.Fatal(err)
	}
	_, err := Load(context.Background(), p, Options{Threads: 1})
	if !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "Gemma 2 27B") {
		t.Fatalf("a 46-layer gemma2: %v, want ErrUnsupportedArch naming Gemma 2 27B", err)
	}
	// swarmd model info says so without loading the file
	if why := Refused("gemma2", gemma2LargeLayers); why == "" || !strings.Contains(err.Error(), why) || Refused("gemma2", 26) != "" {
		t.Fatalf("Refused: %q for 46 layers, %q for 26; Load: %v", why, Refused("gemma2", 26), err)
	}
}

// TestOLMo3BadPattern: an OLMo 3 file whose sliding-window pattern does
// not name every layer (ollama's forward pass would index past it) is
// refused at load, naming the key; one without the key too.
func TestOLMo3BadPattern(t *testing.T) {
	full := synthFile(t, "olmo3", "tiny", "f32")
	for name, edit := range map[string]func(g *shards.GGUF){
		"short": func(g *shards.GGUF) {
			for i := range g.KVs {
				if g.KVs[i].Key == "olmo3.attention.sliding_window_pattern" {
					g.KVs[i].Value = g.KVs[i].Value.([]bool)[:2]
				}
			}
		},
		"missing": func(g *shards.GGUF) {
			g.KVs = slices.DeleteFunc(g.KVs, func(kv shards.KV) bool { return kv.Key == "olmo3.attention.sliding_window_pattern" })
		},
	} {
		p := filepath.Join(t.TempDir(), name+".gguf")
		rewriteHeader(t, full, p, edit)
		_, err := Load(context.Background(), p, Options{Threads: 1})
		if !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), "sliding_window_pattern") {
			t.Errorf("%s pattern: %v, want ErrNotGGUF naming attention.sliding_window_pattern", name, err)
		}
	}
}

// TestNoWindow: a file of a sliding-window family that names no window
// (attention.sliding_window 0) runs as ollama reads it, every layer
// unlimited: as the same weights with a window wider than every position.
func TestNoWindow(t *testing.T) {
	for _, arch := range []string{"gemma2", "gemma3", "gptoss", "olmo3"} {
		t.Run(arch, func(t *testing.T) {
			var runs [2][][]float32
			for i, window := range []uint32{0, 256} {
				p := filepath.Join(t.TempDir(), fmt.Sprintf("%s-window%d.gguf", arch, window))
				rewriteHeader(t, synthFile(t, arch, "tiny", "f32"), p, func(g *shards.GGUF) {
					setUint32(g, synthArch(arch)+".attention.sliding_window", window)
				})
				m := loadT(t, p, Options{Slots: 2, Context: 256})
				s, err := m.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				in := splitPrompt
				for range splitSteps {
					got, err := s.RunRange(context.Background(), 0, m.Info().Layers, in, nil)
					if err != nil {
						t.Fatalf("window %d: %v", window, err)
					}
					runs[i] = append(runs[i], got)
					in = []int32{Greedy(runs[0][len(runs[i])-1])}
				}
				s.Close()
			}
			for step := range runs[0] {
				if d := maxAbsDiff(runs[0][step], runs[1][step]); d > 1e-4*maxAbs(runs[1][step]) {
					t.Fatalf("step %d: no window and a window past every position differ by %g of %g", step, d, maxAbs(runs[1][step]))
				}
			}
		})
	}
}
