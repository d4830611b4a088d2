package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func TestPowerLine(t *testing.T) {
	for _, c := range []struct {
		in   client.PowerStatus
		want string
	}{
		{client.PowerStatus{TakingWork: true}, "no battery"},
		{client.PowerStatus{Battery: &client.Battery{Percent: 55, Charging: true}, Thermal: "fair", TakingWork: true},
			"battery 55%, charging, thermal fair"},
		{client.PowerStatus{Battery: &client.Battery{Percent: 10}, Why: "battery at 10% and not charging (power.min_battery 20)"},
			"battery 10%; NOT taking new work: battery at 10% and not charging (power.min_battery 20)"},
		// A swarmd from before power states answers no "power": nothing
		// to show, and surely not that it refuses work.
		{client.PowerStatus{}, ""},
	} {
		if got := powerLine(c.in); got != c.want {
			t.Errorf("powerLine(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPrintPS(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out}
	ps := client.PS{Models: []client.Loaded{
		{Kind: "role", Roles: []string{"reasoner", "writer"}, Name: "qwen3-0.6b", Start: 0, End: 28, WeightsBytes: 400 << 20,
			KVBytes: 448 << 20, KVPerSessionBytes: 448 << 20, Sessions: 1, Slots: 4, TokPerSec: 21.5},
		{Kind: "shard", ModelCID: "bafkreiabcdefghijklmnop", Start: 0, End: 14, WeightsBytes: 2 << 30, Slots: 4, MsPerLayer: 1.25, Queued: 2},
	}, Memory: client.MemoryStatus{MaxBytes: 8 << 30, UsedBytes: 5 << 30, Source: "max_memory"}}
	if err := printPS(e, ps); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reasoner,writer", "qwen3-0.6b", "[0,28)", "448.0 MiB of 1.8 GiB", "1/4", "21.5 tok/s",
		"…ghijklmnop", "2 GiB", "1.25 ms/layer", "memory: 5 GiB of 8 GiB serving budget used (max_memory)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if printPS(e, client.PS{}); !strings.Contains(out.String(), "no model loaded") || strings.Contains(out.String(), "challenge references") {
		t.Errorf("empty: %q", out.String())
	}
	// Challenge references are not served: a section of their own.
	out.Reset()
	printPS(e, client.PS{References: []client.Loaded{{Kind: "reference", ModelCID: "bafkreiabcdefghijklmnop", Start: 3, End: 4}}})
	if s := out.String(); !strings.Contains(s, "no model loaded") || !strings.Contains(s, "challenge references (layers loaded to check other peers' claims, not served):") ||
		!strings.Contains(s, "[3,4)") {
		t.Errorf("references: %q", s)
	}
}

func TestTaskLine(t *testing.T) {
	now := time.Now().UnixMilli()
	cases := map[string]client.Task{
		"pull hf.co/a/b:Q8_0: download 25% of 4.0 MiB (for 0s)": {Kind: "pull", Name: "hf.co/a/b:Q8_0", Stage: "download", Done: 1 << 20, Total: 4 << 20, Unit: "bytes", State: "running", StartedMS: now},
		"load role writer: /m.gguf: weights 40% (for 0s)":       {Kind: "load", Name: "role writer: /m.gguf", Stage: "weights", Done: 40, Total: 100, Unit: "percent", State: "running", StartedMS: now},
		"fetch bafy:0-2 from P: failed: stream reset":           {Kind: "fetch", Name: "bafy:0-2 from P", State: "failed", Error: "stream reset"},
		"load shard /s.gguf [0,2): done":                        {Kind: "load", Name: "shard /s.gguf [0,2)", State: "done"},
	}
	for want, tk := range cases {
		if got := taskLine(tk); got != want {
			t.Errorf("taskLine = %q, want %q", got, want)
		}
	}
}

func TestPrintPlan(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out}
	p := client.Plan{Name: "qwen3-0.6b", ModelCID: "bafyroot", Layers: 28, LayerBytes: 60 << 20,
		HeadLayers: 9.89, EmbedLayers: 0.0001, HeadBytes: 594 << 20, EmbedBytes: 593 << 20,
		Stages: []client.PlanStage{
			{PeerID: "12D3KooWfirst", Start: 0, End: 9, StageMS: 11.3, EmbedMS: 0.0001},
			{PeerID: "12D3KooWlast", Start: 27, End: 28, StageMS: 13.57, HeadMS: 11.87},
		}, BottleneckMS: 13.57, LatencyMS: 24.87}
	printPlan(e, p)
	for _, want := range []string{"output head: 9.89 layers' time, 594.0 MiB on the last stage", "embedding: 0.0001 layers' time",
		"OF WHICH", "head 11.87", "embedding 0.00", "[27,28)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	printPlan(e, client.Plan{Layers: 4, Stages: []client.PlanStage{{PeerID: "p", End: 4, StageMS: 4}}})
	if !strings.Contains(out.String(), "not counted: the model has no manifest") || strings.Contains(out.String(), "head 0") {
		t.Errorf("no manifest: %q", out.String())
	}
}
