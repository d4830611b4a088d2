package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/moa"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/result")

// filledAgent is an agent's answer with every field set, each to a value
// of its own, so that a swapped or renamed key shows.
func filledAgent(role string) answer.Agent {
	return answer.Agent{Role: role, Peer: "12D3KooWAgent" + role, Model: "qwen3-0.6b", ModelCID: "bagaaiera" + role,
		Content: "the " + role + "'s answer", Tokens: 12, TokPerSec: 30.5, MS: 410.25, ServerMS: 400.5, TTFTMS: 35.75,
		Prompt: 48, Weight: 0.75, Thermal: "fair", Battery: 80, Conn: "punched", Unverified: true, Partial: true,
		PartialReason: "cut off by its deadline", Done: "length", Skipped: []string{"…KooWHung: hung: no pong (2s without progress)"},
		Draft: &answer.Draft{Peer: "12D3KooWDrafter", Drafted: 10, Accepted: 7, Rounds: 3, Error: "drafter gone"},
		Err:   errors.New("never encoded")}
}

func filledMoA() *answer.Result {
	failed := filledAgent("critic")
	failed.Content, failed.Error = "", "critic on …KooWAgentcritic: timed out after 2s"
	agg := filledAgent("aggregator")
	return &answer.Result{Query: "why is the sky blue?", QueryType: string(moa.ComplexReasoning), Classifier: "spotter", Mode: string(moa.ModeMoA),
		AgentResponses: []answer.Agent{filledAgent("reasoner"), filledAgent("writer")},
		FailedAgents:   []answer.Agent{failed}, Aggregator: &agg, FinalAnswer: "the aggregator's answer",
		TotalTimeMS: 1234.5, AgentsResponded: 2}
}

func filledRoute() []answer.Hop {
	return []answer.Hop{{Peer: "12D3KooWStageA", Start: 0, End: 14}, {Peer: "12D3KooWStageB", Start: 14, End: 28}}
}

func filledTrace() answer.Trace {
	return answer.Trace{Kind: "reroute", Route: filledRoute(), Failed: "12D3KooWLiar", Layers: [2]int{14, 28},
		Reason: "stage error: reset", AtToken: 7, DetectMS: 12.5, ReplayMS: 80.25, CostMS: 92.75, Replay: 9, Standby: true,
		Proven: true, Evidence: "stream", Suspects: []string{"12D3KooWSuspect"}, Drafted: []int32{5, 6}, Accepted: 1}
}

func filledGeneration() *answer.Pipeline {
	return &answer.Pipeline{Model: "qwen3-0.6b", ModelCID: "bagaaieramodel", Text: "blue light scatters more",
		Tokens: []int32{101, 102, 103}, PromptTokens: 9, DType: "f32",
		Hops: []answer.HopStat{
			{Peer: "12D3KooWStageA", Start: 0, End: 14, ComputeMS: 10.5, TransferMS: 0.25, Conn: "local"},
			{Peer: "12D3KooWStageB", Start: 14, End: 28, ComputeMS: 11.5, TransferMS: 1.125, Conn: "relayed"}},
		Reroutes: []answer.Reroute{{AtToken: 7, Failed: "12D3KooWLiar", Layers: [2]int{14, 28}, Reason: "stage error: reset",
			NewRoute: filledRoute(), ReplayTokens: 9, DetectMS: 12.5, ReplayMS: 80.25, CostMS: 92.75, Standby: true,
			Proven: true, Evidence: "stream", Suspects: []string{"12D3KooWSuspect"}}},
		TTFTMS: 40.5, PrefillMS: 30.25, DecodeTPS: 25.5, TotalMS: 500.75, Done: "stop", SpotChecked: 4,
		SpotMaxDiff: 0.001, Mismatches: 1, Drafted: 6, DraftAccepted: 5, DraftRounds: 2}
}

// TestResultJSON: what clients read (the HTTP API's query bodies and
// streamed events, the mobile facade, swarmctl, the dashboard) keeps its
// keys, shapes and values: each body of a filled result against its
// golden file, written from the code before the result types were made
// one. Bodies built as structs keep their bytes; those first built as
// maps (pipeline and stopped answers) keep their keys and values, in the
// order of their fields (a map encoded its keys sorted).
func TestResultJSON(t *testing.T) {
	spec := querySpec{prompt: "why is the sky blue?"}
	took := 1500 * time.Microsecond
	cases := []struct {
		name  string
		v     any
		exact bool // the same bytes, not only the same keys and values
	}{
		{"moa", filledMoA(), true},
		{"agent_event", filledAgent("reasoner"), true},
		{"trace_event", filledTrace(), true},
		{"pipeline", pipelineResult(spec.prompt, filledGeneration()), false},
		{"stopped", stoppedResult(spec, nil, "blue light", took), false},
		{"stopped_moa", stoppedResult(spec, &outcome{result: filledMoA()}, "the aggr", took), true},
		{"stopped_pipeline", stoppedResult(spec, &outcome{result: pipelineResult(spec.prompt, filledGeneration())}, "blue", took), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.MarshalIndent(c.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "result", c.name+".json")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if c.exact && !bytes.Equal(got, want) {
				t.Fatalf("%s changed:\n got %s\nwant %s", path, got, want)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%s: keys or values changed:\n got %s\nwant %s", path, got, want)
			}
		})
	}
}
