package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSpeculate: `swarmctl bench pipeline --speculate` on a daemon
// with pipeline.draft reports plain and speculative decode side by side,
// with the draft's rounds; on a daemon without one it says so.
func TestBenchSpeculate(t *testing.T) {
	model := tinyModel(t)
	cfg := filepath.Join(t.TempDir(), "swarmd.json")
	if err := os.WriteFile(cfg, []byte(`{"pipeline": {"draft": "`+model+`", "draft_min": 2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--config", cfg, "--shard", model+":0-4")
	var out struct {
		Plain    float64 `json:"median_plain_tok_s"`
		Spec     float64 `json:"median_speculative_tok_s"`
		Ratio    float64 `json:"ratio"`
		Drafted  int     `json:"drafted"`
		Accepted int     `json:"draft_accepted"`
		Rounds   int     `json:"draft_rounds"`
	}
	d.ctlJSON(&out, "bench", "pipeline", "--speculate", "--n", "2", "--max-tokens", "16", "Tell me about the swarm.")
	if out.Plain <= 0 || out.Spec <= 0 || out.Ratio <= 0 || out.Rounds == 0 || out.Accepted*10 < out.Drafted*8 {
		t.Fatalf("bench --speculate: %+v", out)
	}
	t.Logf("%+v", out)
	plain := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", model+":0-4")
	if _, errOut, code := plain.ctl("bench", "pipeline", "--speculate", "--n", "1", "--max-tokens", "4"); code == 0 ||
		!strings.Contains(errOut, "did not draft") {
		t.Fatalf("bench --speculate without a draft: exit %d, %q", code, errOut)
	}
}
