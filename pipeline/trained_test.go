package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// TestTrainedWeightsRoute: on a model with trained weights (the engine's
// testdata/trained fixtures), a route of two stages writes the greedy text
// of one machine and of llama.cpp on the same file, in f32 and q8_0.
func TestTrainedWeightsRoute(t *testing.T) {
	dir, doc := trainedDir, llamaCompletions(t)
	// one route per file, its peers living as long as the whole test
	origins := map[string]*Originator{}
	for _, r := range doc.Completions {
		if origins[r.File] != nil {
			continue
		}
		full := filepath.Join(dir, r.File)
		_, _, c, err := shards.BuildManifest(full)
		if err != nil {
			t.Fatal(err)
		}
		origins[r.File] = originatorForFile(t, full, newStagePeer(t), servingPeers(t, full, c.String(), [2]int{0, 2}, [2]int{2, 4})...)
	}
	for _, r := range doc.Completions {
		t.Run(fmt.Sprintf("%s/%s", r.File, r.Prompt), func(t *testing.T) {
			full := filepath.Join(dir, r.File)
			o := origins[r.File]
			res, err := o.Generate(t.Context(), Request{Prompt: r.Prompt, MaxTokens: r.N})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Hops) != 2 {
				t.Fatalf("%d hops, want 2", len(res.Hops))
			}
			one := referenceOne(t, full, r.Prompt, r.N)
			if !sameTokens(res.Tokens, one.Tokens) || res.Text != one.Text {
				t.Fatalf("route %q, one machine %q", res.Text, one.Text)
			}
			if res.Text != r.Text {
				t.Fatalf("route %q, llama.cpp %q", res.Text, r.Text)
			}
		})
	}
}

// trainedDir holds the trained fixtures and llama.cpp's text on them.
const trainedDir = "../internal/engine/testdata/trained"

// completion is one of llama.cpp's greedy completions on a trained fixture.
type completion struct {
	File, Prompt, Text string
	N                  int
}

// llamaCompletions reads llama.cpp's completions (llama-cpp.json).
func llamaCompletions(t *testing.T) (doc struct {
	Completions []completion `json:"completions"`
}) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(trainedDir, "llama-cpp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// referenceOne is one machine's greedy raw completion of prompt.
func referenceOne(t *testing.T, full, prompt string, n int) engine.Result {
	t.Helper()
	m, err := engine.Load(t.Context(), full, engine.Options{Threads: 1, Slots: 1, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(t.Context(), engine.Request{Prompt: prompt, MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
