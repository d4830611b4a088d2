package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestLiarOnRealTraffic: a peer that passed its challenges (proven in the
// ledger, as a challenge leaves it) lies on real sessions only, from its
// 4th real step on, answering every probe honestly: as the last hop it
// replaces the token it chooses (and returns honest logits when asked for
// them), as a middle hop it scrambles the hidden states it passes on.
// Default settings (spot_check 0.1, probation 5, f32 wire, greedy), 30
// asks. Its first generations are checked (probation), checked the way
// unchecked ones run (the last hop chooses the token); the disagreement is
// settled by replays on mixed routes, real sessions, and a third holder of
// the disputed layers (another peer, or this peer's own copy): the liar is
// banned at its first lie and no answer is poisoned; honest hops on its
// route never are. With one alternative holder and no copy here
// ("alone"), this peer fetches the disputed layers' weights, verified
// against the manifest, and replays the session through them: the liar is
// banned alike. Where no weights are to be had ("alone-no-weights"),
// nothing decides: nobody is banned, the layers stay on alert (every
// generation over them checked), and the answers that went through either
// disputed hop say they are disputed. A liar on the check route rather
// than the primary is convicted alike.
func TestLiarOnRealTraffic(t *testing.T) {
	t.Parallel() // long and self-contained: runs beside the other long ones
	const asks, n = 30, 8
	for _, typ := range []string{"f32", "q8_0", "q4_k"} {
		full, cid := modelOf(t, "qwen3", "small", typ)
		want := referenceFile(t, full, question, n)
		for _, attack := range []string{"last-token", "middle-hidden"} {
			judges := []string{"third-holder", "local", "alone", "alone-no-weights", "on-check-route"}
			if typ != "f32" {
				judges = judges[:3] // the rest does not depend on the weights
			}
			for _, judge := range judges {
				t.Run(typ+"/"+attack+"/"+judge, func(t *testing.T) {
					layers := map[string][2]int{"last-token": {6, 8}, "middle-hidden": {2, 6}}[attack]
					origin := newStagePeer(t)
					if judge == "local" {
						origin.serveFile(t, full, cid, layers[0], layers[1])
						origin.srv.Local()[0].MsPerLayer = 1000 // to settle, never to route unless it must
					}
					// Two holders of every range: the liar's layers have
					// one more (its third holder) or not.
					ranges := [][2]int{{0, 2}, {0, 2}, {2, 6}, {2, 6}, {6, 8}, {6, 8}}
					alone := strings.HasPrefix(judge, "alone")
					if judge == "local" || alone {
						ranges = slices.DeleteFunc(ranges, func(r [2]int) bool { return r == layers })
						ranges = append(ranges, layers)
					}
					honest := servingPeers(t, full, cid, ranges...)
					l := newLiar(t, full, cid, layers[0], layers[1])
					l.realOnly, l.from = true, 3
					switch attack {
					case "last-token":
						vocab := int32(l.srv.Local()[0].Model.Info().VocabSize)
						l.result = func(r *Result) {
							if len(r.Logits) == 0 { // a patched stage: the token it chose, replaced
								r.Token = (r.Token + 7) % vocab
							}
						}
					case "middle-hidden":
						l.hidden = func(h []float32) {
							for i := range h {
								h[i] = -2*h[i] + 0.5
							}
						}
					}
					o := originatorTrusting(t, full, swarm.NewTrust(), origin, append(honest, l.stagePeer)...)
					o.SpotCheck = SpotCheck{} // the defaults
					slowDown(o, cid, layers, honest...)
					var settle settleCost
					switch judge {
					case "alone":
						o.Verified = settle.verified(t, full)
					case "alone-no-weights":
						o.Verified = func(context.Context, string, int, int) (*Shard, func(), error) {
							return nil, nil, errors.New("no holder sends them")
						}
					}
					if judge == "on-check-route" {
						// One honest holder is faster than the liar: the
						// primary takes it, the check route the liar.
						for _, p := range honest {
							if p.srv.Shards()[0].Start == layers[0] && p.srv.Shards()[0].End == layers[1] {
								o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), 1)
								break
							}
						}
					}
					for _, p := range append(honest, l.stagePeer) { // each passed its challenge
						o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 8})
					}
					poisoned, bannedAt, convictions := 0, 0, 0
					asks := asks
					if judge == "alone-no-weights" {
						asks = 10 // nothing decides: each ask settles at length
					}
					disputed := 0
					for ask := 1; ask <= asks; ask++ {
						think := false
						res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
							OnTrace: func(ev answer.Trace) {
								if ev.Kind == "mismatch" && ev.Proven {
									convictions++
									if ev.Failed != l.h.ID().String() || ev.Evidence != EvidenceMajority {
										t.Errorf("conviction %+v: want the liar, by a majority", ev)
									}
									t.Logf("ask %d: %s", ask, ev.Reason)
								}
							}})
						if err != nil {
							t.Fatalf("ask %d: %v", ask, err)
						}
						if !sameTokens(res.Tokens, want) {
							poisoned++
						}
						if len(res.Disputed) > 0 {
							disputed++
							if d := res.Disputed[0]; d.Start != layers[0] || d.End != layers[1] || !slices.Contains(d.Peers, l.h.ID().String()) {
								t.Errorf("ask %d: disputed %+v, want layers %v with the liar", ask, res.Disputed, layers)
							}
						}
						if b, _ := o.View.Trust().Banned(l.h.ID()); b && bannedAt == 0 {
							bannedAt = ask
						}
					}
					assertNoHonestBans(t, o.View.Trust(), honest...)
					t.Logf("%s %s %s: %d of %d answers poisoned, liar banned at ask %d (0: never), %d convictions, liar's real steps %d, %d answers marked disputed",
						typ, attack, judge, poisoned, asks, bannedAt, convictions, l.steps.Load(), disputed)
					if judge == "alone" {
						t.Logf("%s %s: settled from verified weights %d time(s): %d bytes loaded in %v", typ, attack, settle.n, settle.bytes, settle.took)
						if settle.n != 1 {
							t.Errorf("settled from verified weights %d times, want once", settle.n)
						}
					}
					if l.steps.Load() <= l.from {
						t.Fatalf("the liar ran %d real steps: it never lied", l.steps.Load())
					}
					if judge == "alone-no-weights" {
						// One honest peer's word against the liar's: no
						// ban, and every answer through either says so.
						if bannedAt != 0 {
							t.Errorf("the liar was banned with nothing to decide")
						}
						if !o.alerts.on(cid, []Hop{{Start: layers[0], End: layers[1]}}) {
							t.Error("the disputed layers are not on alert")
						}
						if disputed < asks {
							t.Errorf("%d of %d answers marked disputed, all ran the disputed layers", disputed, asks)
						}
						return
					}
					if disputed > 0 {
						t.Errorf("%d answers marked disputed, with the dispute settled", disputed)
					}
					if poisoned > 3 {
						t.Errorf("%d of %d answers poisoned", poisoned, asks)
					}
					if bannedAt == 0 || bannedAt > 3 {
						t.Errorf("the liar was banned at ask %d (0: never)", bannedAt)
					}
					assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()})
				})
			}
		}
	}
}

func assertNoHonestBans(t *testing.T, trust *swarm.Trust, honest ...*stagePeer) {
	t.Helper()
	assertBans(t, trust, nil, honest...)
}

// TestProbation: a proven peer's generations are all checked until it has
// served Probation checked answers that agreed, then they are sampled; the
// count is kept in the ledger and survives a save and restore.
func TestProbation(t *testing.T) {
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	origin := newStagePeer(t)
	peers := servingPeers(t, full, cid, [2]int{0, 4}, [2]int{4, 8}, [2]int{0, 4}, [2]int{4, 8})
	o := originatorTrusting(t, full, swarm.NewTrust(), origin, peers...)
	o.SpotCheck = SpotCheck{Probability: -1, Probation: 3}
	for _, p := range peers {
		o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 8})
	}
	var checked []bool
	for range 5 {
		think := false
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 4, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		checked = append(checked, res.SpotChecked > 0)
	}
	if fmt.Sprint(checked) != "[true true true false false]" {
		t.Fatalf("checked generations: %v, want the first 3", checked)
	}
	b, err := o.View.Trust().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	tr := swarm.NewTrust()
	if err := tr.Restore(b); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if got := tr.Checked(p.h.ID()); got != 3 {
			t.Errorf("%s: %d checked answers after a restore, want 3", short(p.h.ID().String()), got)
		}
	}
}

// TestHonestSwarmNeverConvicts: honest peers over routes cut at other
// layers, every generation checked (200 of them, varied prompts), on f32,
// q8_0 and q4_k weights: no mismatch, nobody banned.
func TestHonestSwarmNeverConvicts(t *testing.T) {
	t.Parallel()
	const gens = 200
	for _, typ := range []string{"f32", "q8_0", "q4_k"} {
		t.Run(typ, func(t *testing.T) {
			full, cid := modelOf(t, "qwen3", "small", typ)
			origin := newStagePeer(t)
			peers := servingPeers(t, full, cid, [2]int{0, 3}, [2]int{3, 8}, [2]int{0, 5}, [2]int{5, 8}, [2]int{0, 4}, [2]int{4, 8})
			o := originatorTrusting(t, full, swarm.NewTrust(), origin, peers...)
			o.SpotCheck = SpotCheck{Probability: 1}
			checked, mismatches := 0, 0
			for i := range gens {
				think := false
				msgs := []engine.Message{{Role: "user", Content: fmt.Sprintf("Count to %d, then name a colour.", i)}}
				res, err := o.Generate(t.Context(), Request{Messages: msgs, Think: &think, MaxTokens: 2, Sampling: greedy})
				if err != nil {
					t.Fatalf("generation %d: %v", i, err)
				}
				checked += res.SpotChecked
				mismatches += res.Mismatches
			}
			assertNoHonestBans(t, o.View.Trust(), peers...)
			if mismatches != 0 {
				t.Errorf("%d mismatches between honest routes", mismatches)
			}
			t.Logf("%s: %d generations, %d steps checked, %d mismatches, nobody banned", typ, gens, checked, mismatches)
		})
	}
}

// settleCost is what an originator's Verified hook loaded: the test's
// stand-in for the node's fetch from a holder, cutting the layers from
// the model file (whose manifest the node checks them against).
type settleCost struct {
	n     int
	bytes int64
	took  time.Duration
}

func (c *settleCost) verified(t *testing.T, full string) func(ctx context.Context, model string, lo, hi int) (*Shard, func(), error) {
	return func(ctx context.Context, model string, lo, hi int) (*Shard, func(), error) {
		start := time.Now()
		out := filepath.Join(t.TempDir(), fmt.Sprintf("settle.%d-%d.gguf", lo, hi))
		if _, err := shards.Slice(full, out, lo, hi); err != nil {
			return nil, nil, err
		}
		sh, err := LoadShard(ctx, out, model, lo, hi, engine.Options{Threads: 1, Slots: 2, Context: 1024, Isolated: true})
		if err != nil {
			return nil, nil, err
		}
		if fi, err := os.Stat(out); err == nil {
			c.bytes += fi.Size()
		}
		c.n++
		c.took += time.Since(start)
		return sh, func() { sh.Model.Close() }, nil
	}
}

// TestHonestMixedKernelsNeverConvict: honest peers of two builds, one with
// ggml's repacked Q4 kernels and one without (their records name other
// builds), serve q4_k models of every architecture on routes cut at other
// layers, every generation spot-checked: whatever the two kernels make of
// a step (in a mixture of experts a near tie between two experts can go
// either way, and that step's logits then differ by a third), nobody is
// banned, not even by a third holder of the other build's kernels taking
// a side (a ban over a mixture of experts across builds needs ten times
// the bound: banMargin); in a dense model the routes disagree only at near ties (each
// route's token wins its own logits within the tolerance), which are no
// mismatch. Mismatches (MoE expert flips) and near ties are logged.
func TestHonestMixedKernelsNeverConvict(t *testing.T) {
	if !engine.RepackAvailable() {
		t.Skip("this build has no repacked Q4 kernels: every peer computes alike")
	}
	const gens = 12
	moe := []string{"qwen3moe", "gptoss", "deepseek2", "glm4moelite", "llama4", "lfm2moe", "qwen3next",
		"nemotron_h_moe"}
	for _, arch := range append([]string{"qwen3", "gemma3", "lfm2",
		"nemotron_h"}, moe...) {
		t.Run(arch, func(t *testing.T) {
			full, cid := modelOf(t, arch, "small", "q4_k")
			mi, err := shards.ReadModelInfo(full)
			if err != nil {
				t.Fatal(err)
			}
			n := mi.Layers
			origin := newStagePeer(t)
			var peers []*stagePeer
			// two repacked holders of each half (each the other's third
			// holder), and plain holders cut elsewhere
			for i, r := range [][2]int{{0, n / 2}, {n / 2, n}, {0, n / 2}, {n / 2, n}, {0, 3}, {3, n}} {
				p := newStagePeer(t)
				p.plain = i >= 4
				p.serveFile(t, full, cid, r[0], r[1])
				peers = append(peers, p)
			}
			o := originatorTrusting(t, full, swarm.NewTrust(), origin, peers...)
			o.SpotCheck = SpotCheck{Probability: 1}
			checked, mismatches, ties := 0, 0, 0
			for i := range gens {
				think := false
				msgs := []engine.Message{{Role: "user", Content: fmt.Sprintf("Count to %d, then name a colour.", i)}}
				res, err := o.Generate(t.Context(), Request{Messages: msgs, Think: &think, MaxTokens: 8, Sampling: greedy})
				if err != nil {
					t.Fatalf("generation %d: %v", i, err)
				}
				checked += res.SpotChecked
				mismatches += res.Mismatches
				ties += res.NearTies
			}
			assertNoHonestBans(t, o.View.Trust(), peers...)
			t.Logf("%s q4_k, repacked and plain kernels: %d generations, %d steps checked, %d near ties, %d mismatches, nobody banned", arch, gens, checked, ties, mismatches)
			if !slices.Contains(moe, arch) && mismatches > 0 {
				t.Errorf("%d mismatches between honest routes of a dense model", mismatches)
			}
		})
	}
}
