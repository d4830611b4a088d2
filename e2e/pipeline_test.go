package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

var (
	archMu     sync.Mutex
	archModels = map[string]string{}
)

// archModel makes a synthetic model of an architecture with the real CLI.
func archModel(t *testing.T, arch string) string {
	t.Helper()
	archMu.Lock()
	defer archMu.Unlock()
	if p, ok := archModels[arch]; ok {
		return p
	}
	p := filepath.Join(bin, "tiny-"+arch+".gguf")
	if out, code := runSwarmd(t, "model", "synth", "--arch", arch, "--size", "tiny", "--type", "f32", "-o", p); code != 0 {
		t.Fatalf("swarmd model synth: exit %d\n%s", code, out)
	}
	archModels[arch] = p
	return p
}

type pipeResult struct {
	FinalAnswer string `json:"final_answer"`
	Pipeline    struct {
		Tokens   []int32                 `json:"tokens"`
		DType    string                  `json:"dtype"`
		Hops     []struct{ Peer string } `json:"hops"`
		Reroutes []struct {
			Failed string `json:"failed_peer"`
		} `json:"reroutes"`
	} `json:"pipeline"`
}

var pipeAsk = []string{"ask", "--mode", "pipeline", "--dtype", "f32", "--repeat-penalty", "1.5", "--max-tokens", "24"}

// prompts to try: a random-weight model may end its answer early on one;
// the comparison needs a reference that runs the full 24 steps.
var pipePrompts = []string{"Explain pipeline parallelism in one sentence.", "Tell me about the swarm.",
	"Why is the sky blue?", "Write a haiku about routers."}

// stageCluster starts one daemon per range; the first bootstraps the rest.
func stageCluster(t *testing.T, model string, ranges [][2]int) []*daemon {
	var ds []*daemon
	boot := ""
	for _, r := range ranges {
		args := []string{"--no-mdns", "--threads", "1", "--shard", fmt.Sprintf("%s:%d-%d", model, r[0], r[1])}
		if boot != "" {
			args = append(args, "--bootstrap", boot)
		}
		d := startDaemon(t, "", args...)
		if boot == "" {
			boot = d.bootstrapAddr()
		}
		ds = append(ds, d)
	}
	eventually(t, 10*time.Second, "every stage announced", func() bool {
		var sh client.Shards
		ds[0].ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered && len(sh.Models[0].Holders) == len(ranges)
	})
	return ds
}

// TestPipelineStagesMatchSingleNode: 2, 3 and 4 daemons each running part
// of the model give exactly the tokens of one daemon running all of it,
// with f32 hidden states, for every architecture.
func TestPipelineStagesMatchSingleNode(t *testing.T) {
	splits := [][][2]int{{{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}}
	for _, arch := range []string{"qwen3", "qwen2", "llama"} {
		t.Run(arch, func(t *testing.T) {
			model := archModel(t, arch)
			var want []int32
			var prompt string
			for _, ranges := range splits {
				ds := stageCluster(t, model, ranges)
				var res pipeResult
				if want == nil { // one daemon runs the whole model: the reference
					for _, p := range pipePrompts {
						ds[0].ctlJSON(&res, append(pipeAsk, p)...)
						distinct := map[int32]bool{}
						for _, w := range res.Pipeline.Tokens {
							distinct[w] = true
						}
						if len(res.Pipeline.Tokens) == 24 && len(distinct) >= 4 {
							want, prompt = res.Pipeline.Tokens, p
							break
						}
					}
					if want == nil {
						t.Fatalf("no prompt gives 24 varied reference tokens (last: %v)", res.Pipeline.Tokens)
					}
					for _, d := range ds {
						d.kill()
					}
					continue
				}
				ds[0].ctlJSON(&res, append(pipeAsk, prompt)...)
				if len(res.Pipeline.Hops) != len(ranges) || res.Pipeline.DType != "f32" {
					t.Fatalf("%d stages: route of %d hops (%s)", len(ranges), len(res.Pipeline.Hops), res.Pipeline.DType)
				}
				if !slices.Equal(res.Pipeline.Tokens, want) {
					t.Fatalf("%d stages: tokens differ from one daemon:\n got %v\nwant %v", len(ranges), res.Pipeline.Tokens, want)
				}
				for _, d := range ds {
					d.kill()
				}
			}
		})
	}
}

// TestPipelineFailover: kill -9 the middle stage during decode while a
// spare holds its range: the text is the undisturbed text. Then with no
// spare left, the error names the uncovered layers.
func TestPipelineFailover(t *testing.T) {
	model := archModel(t, "qwen3")
	ds := stageCluster(t, model, [][2]int{{0, 1}, {1, 3}, {3, 4}, {1, 3}})
	byID := map[string]*daemon{}
	for _, d := range ds {
		byID[d.peerID()] = d
	}
	c := client.New(ds[0].api, "")
	rp := float32(1.5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var req client.QueryRequest
	var ref *answer.Result
	for _, p := range pipePrompts {
		req = client.QueryRequest{Query: p, Mode: "pipeline", MaxTokens: 1000, DType: "f32", RepeatPenalty: &rp, Stream: true}
		r, err := c.Query(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Pipeline != nil && r.Pipeline.Done == "length" {
			ref = r
			break
		}
	}
	if ref == nil {
		t.Fatal("no prompt runs 1000 tokens without ending")
	}

	var middle string
	tokens := 0
	var killedAt time.Time
	res, err := c.Query(ctx, req, func(ev client.Event) {
		switch ev.Type {
		case "trace":
			if tr := ev.Trace; tr.Kind == "route" {
				middle = tr.Route[1].Peer
			}
		case "token":
			if tokens++; tokens == 40 {
				killedAt = time.Now()
				byID[middle].kill()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if killedAt.IsZero() {
		t.Fatal("generation ended before the middle stage was killed")
	}
	if res.FinalAnswer != ref.FinalAnswer {
		t.Fatalf("text after failover differs from the undisturbed run (%d vs %d bytes)", len(res.FinalAnswer), len(ref.FinalAnswer))
	}
	var p pipeResult
	json.Unmarshal(mustJSON(t, res), &p)
	if len(p.Pipeline.Reroutes) != 1 || p.Pipeline.Reroutes[0].Failed != middle {
		t.Fatalf("reroutes: %+v (killed %s)", p.Pipeline.Reroutes, middle)
	}
	t.Logf("failover: killed the middle stage after %d streamed tokens; same %d-byte text", tokens, len(res.FinalAnswer))

	// Kill the spare too: nobody holds [1,3).
	for id, d := range byID {
		if id != middle && d != ds[0] && d != ds[2] {
			d.kill()
		}
	}
	_, errOut, code := ds[0].ctl("ask", "--mode", "pipeline", "--max-tokens", "8", "hello")
	if code != 1 || !strings.Contains(errOut, "[1,3)") {
		t.Fatalf("no replacement: exit %d, stderr %q", code, errOut)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShardFetch: a daemon told to serve layers of a model by CID fetches
// the slice from a peer holding the model, verified by CID, and serves it.
func TestShardFetch(t *testing.T) {
	model := archModel(t, "qwen3")
	holder := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", model+":0-2")
	var sh client.Shards
	eventually(t, 10*time.Second, "holder announces", func() bool {
		holder.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1
	})
	cid := sh.Models[0].ModelCID
	fetcher := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", holder.bootstrapAddr(),
		"--shard", fmt.Sprintf("%s:2-4", cid))
	took := eventually(t, 30*time.Second, "fetched slice served and model covered", func() bool {
		holder.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered
	})
	t.Logf("slice fetched and served after %s", took)
	eventually(t, 15*time.Second, "the fetcher sees the model covered", func() bool {
		fetcher.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered
	})
	var res pipeResult
	fetcher.ctlJSON(&res, append(pipeAsk, pipePrompts[0])...)
	if len(res.Pipeline.Tokens) == 0 || len(res.Pipeline.Hops) != 2 {
		t.Fatalf("pipeline over the fetched slice: %+v", res.Pipeline)
	}

	// The OpenAI API names the pipeline model by its name.
	body := fmt.Sprintf(`{"model":%q,"max_tokens":6,"messages":[{"role":"user","content":"hi"}]}`, sh.Models[0].Name)
	resp, err := http.Post("http://"+holder.api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cc struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil || resp.StatusCode != 200 || len(cc.Choices) != 1 || cc.Usage.CompletionTokens == 0 {
		t.Fatalf("chat completion on the pipeline model: HTTP %d, %+v, %v", resp.StatusCode, cc, err)
	}
}
