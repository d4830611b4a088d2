package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trainedDir holds models with trained weights and llama.cpp's greedy text
// on them (testdata/trained/README.md says how they were made).
const trainedDir = "testdata/trained"

// llamaCppRecord is one of llama.cpp's greedy completions on a fixture.
type llamaCppRecord struct {
	File   string `json:"file"`
	Prompt string `json:"prompt"`
	N      int    `json:"n"`
	Text   string `json:"text"`
}

func llamaCppRecords(t *testing.T) []llamaCppRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(trainedDir, "llama-cpp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Completions []llamaCppRecord `json:"completions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Completions) == 0 {
		t.Fatal("llama-cpp.json holds no completions")
	}
	return doc.Completions
}

// greedyText is the engine's raw greedy completion of prompt, n tokens.
func greedyText(t *testing.T, m *Model, prompt string, n int) string {
	t.Helper()
	res, err := m.Generate(context.Background(), Request{Prompt: prompt, MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != n {
		t.Fatalf("%q: %d tokens (%s), want %d", prompt, len(res.Tokens), res.Done, n)
	}
	return res.Text
}

// TestTrainedWeightsMatchLlamaCpp: on a model with trained weights the
// engine's greedy text is the text llama.cpp wrote on the same file, in f32
// and in q8_0 (which both quantized alike, with llama-quantize).
func TestTrainedWeightsMatchLlamaCpp(t *testing.T) {
	models := map[string]*Model{}
	for _, r := range llamaCppRecords(t) {
		m := models[r.File]
		if m == nil {
			m = loadT(t, filepath.Join(trainedDir, r.File), Options{Slots: 1, Context: 256})
			models[r.File] = m
		}
		if got := greedyText(t, m, r.Prompt, r.N); got != r.Text {
			t.Errorf("%s %q:\n engine    %q\n llama.cpp %q", r.File, r.Prompt, got, r.Text)
		}
	}
}

// TestTrainedWeightsWriteEnglish: the trained model writes the words of the
// text it was trained on (this repository's documentation), where the same
// shape with its random starting weights does not: the fixture is what the
// tests above take it for.
func TestTrainedWeightsWriteEnglish(t *testing.T) {
	known := map[string]bool{}
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, f := range append(docs, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range words(string(b)) {
			known[w] = true
		}
	}
	share := func(m *Model) float64 {
		in, all := 0, 0
		for _, r := range llamaCppRecords(t) {
			if r.File != "docs-llama-f32.gguf" {
				continue
			}
			for _, w := range words(greedyText(t, m, r.Prompt, r.N)) {
				all++
				if known[w] {
					in++
				}
			}
		}
		if all == 0 {
			t.Fatal("no words written")
		}
		return float64(in) / float64(all)
	}
	trained := share(loadT(t, filepath.Join(trainedDir, "docs-llama-f32.gguf"), Options{Slots: 1, Context: 256}))
	untrained := filepath.Join(t.TempDir(), "untrained.gguf")
	if err := Synth(context.Background(), untrained, SynthSpec{Arch: "llama", Size: "tiny", Type: "f32", Seed: 7, NoChatTemplate: true}); err != nil {
		t.Fatal(err)
	}
	random := share(loadT(t, untrained, Options{Slots: 1, Context: 256}))
	t.Logf("words of the documentation: trained %.0f%%, random weights %.0f%%", 100*trained, 100*random)
	if trained < 0.8 || random > 0.5 {
		t.Fatalf("trained model writes %.0f%% known words, random weights %.0f%%: want >= 80%% and <= 50%%", 100*trained, 100*random)
	}
}

var wordRE = regexp.MustCompile(`[A-Za-z]{2,}`)

func words(s string) []string {
	ws := wordRE.FindAllString(s, -1)
	for i := range ws {
		ws[i] = strings.ToLower(ws[i])
	}
	return ws
}
