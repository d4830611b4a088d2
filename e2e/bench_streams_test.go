package e2e

import (
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/client"
)

// TestBenchStreams: `swarmctl bench streams` on a daemon serving a role
// reports one level per concurrency asked, with streamed tokens timed, and
// the role's model ran the four streams' steps batched (fewer graphs than
// steps in `swarmctl ps`).
func TestBenchStreams(t *testing.T) {
	model := tinyModel(t)
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--role", "concise="+model)
	var out struct {
		Mode   string `json:"mode"`
		Levels []struct {
			Streams      int     `json:"streams"`
			AggregateTPS float64 `json:"aggregate_tok_s"`
			PerStreamTPS float64 `json:"per_stream_tok_s"`
			P50MS        float64 `json:"p50_ms_per_token"`
			P95MS        float64 `json:"p95_ms_per_token"`
			FirstMS      float64 `json:"first_token_ms"`
			Speedup      float64 `json:"speedup"`
		} `json:"levels"`
	}
	d.ctlJSON(&out, "bench", "streams", "--streams", "1,4", "--n", "2", "--max-tokens", "12", "--mode", "concise",
		"Tell me about the swarm.")
	if out.Mode != "concise" || len(out.Levels) != 2 || out.Levels[0].Streams != 1 || out.Levels[1].Streams != 4 {
		t.Fatalf("levels: %+v", out)
	}
	for _, l := range out.Levels {
		// The tiny model's tokens may come in one read: gaps of 0 ms are
		// real figures here.
		if !(l.AggregateTPS > 0 && l.P50MS >= 0 && l.P95MS >= l.P50MS && l.FirstMS > 0 && l.Speedup > 0) {
			t.Fatalf("level %+v: a figure is missing", l)
		}
	}
	t.Logf("curve: %+v", out.Levels)
	var ps client.PS
	d.ctlJSON(&ps, "ps")
	if len(ps.Models) != 1 || !ps.Models[0].Batched || ps.Models[0].Steps <= ps.Models[0].Graphs {
		t.Fatalf("the role's model did not batch the streams' steps: %+v", ps.Models)
	}
	// Bad levels are a usage error naming the flag.
	if _, errOut, code := d.ctl("bench", "streams", "--streams", "1,0"); code != 2 || !strings.Contains(errOut, "--streams") {
		t.Fatalf("--streams 1,0: exit %d, %q", code, errOut)
	}
}
