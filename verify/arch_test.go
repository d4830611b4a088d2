package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestHonestPeersOfEveryArch: for every architecture the engine runs, an
// honest peer passes a challenge of every layer of the model: bit for bit
// with f32 weights on this build, and with q4_k weights when its kernels
// differ from the checker's (its Q4 weights in ggml's plain layout where
// the checker's are repacked, so its record names another build and it
// gets quantTolerance). The worst relative error per architecture is
// logged: the measured margin of each family under the tolerance (a
// mixture of experts whose router flips an expert between kernels would
// show here first).
func TestHonestPeersOfEveryArch(t *testing.T) {
	const challenges = 3
	archs := slices.DeleteFunc(slices.Clone(engine.Architectures), func(a string) bool { return a == "gpt-oss" }) // gptoss's other name
	for _, arch := range archs {
		for _, c := range []struct {
			size, typ string
			plain     bool // the peer's Q4 weights unrepacked
			max       float64
		}{
			{"tiny", "f32", false, 0},
			{"small", "q4_k", true, quantTolerance},
		} {
			t.Run(fmt.Sprintf("%s/%s", arch, c.typ), func(t *testing.T) {
				opts := testOpts
				opts.NoRepack = c.plain
				full, cid, m := synthLoaded(t, arch, c.size, c.typ, opts)
				if c.plain {
					ref := load(t, full)
					if ref.Repacked() == 0 {
						t.Skip("this build has no repacked Q4 kernels (CGO_CPPFLAGS=-DGGML_USE_CPU_REPACK): both sides would compute alike")
					}
				}
				lr := &liar{h: newHost(t), m: m}
				lr.h.SetStreamHandler(ProtocolID, lr.handle)
				h := newHost(t)
				link(h, lr.h)
				n := m.Info().Layers
				ck := newChecker(h, newFileRef(t, cid).add(0, n, full))
				ck.CheckLayers = n
				ck.Arch = func(peer.ID) string { return "another build" }
				worst := &Report{WorstLayer: -1}
				for range challenges { // each on an input of its own
					rep, err := ck.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid, Start: 0, End: n})
					if err != nil {
						t.Fatalf("an honest %s peer: %v", c.typ, err)
					}
					want := n // every layer; a model that runs whole only, its last (TestWholeOnlyChallenge)
					if engine.WholeOnly(arch) != "" {
						want = 1
					}
					if len(rep.Checked) != want {
						t.Fatalf("%d layers checked, want %d", len(rep.Checked), want)
					}
					if rep.WorstRelErr > worst.WorstRelErr || worst.WorstLayer < 0 {
						worst = rep
					}
				}
				bound := c.max
				if engine.WholeOnly(arch) != "" { // its logits, after every layer (Check)
					bound *= math.Sqrt(float64(n))
				}
				if worst.WorstRelErr > bound {
					t.Fatalf("worst relative error %.3g at layer %d, want at most %.3g", worst.WorstRelErr, worst.WorstLayer, bound)
				}
				t.Logf("%s %s %s, peer repacked %v: %d layers x %d challenges, worst relative error %.3g at layer %d (tolerance %.0e)",
					arch, c.size, c.typ, !c.plain, n, challenges, worst.WorstRelErr, worst.WorstLayer, ck.tolerance(m, lr.h.ID()))
			})
		}
	}
}

// TestWholeOnlyChallenge: a model whose layers cannot run one by one
// (gemma3n: its layers hand on AltUp streams, not a hidden state) is
// challenged whole and checked on its logits: an honest peer passes, one
// whose logits are 2% off fails and is banned, and a claim of part of it
// cannot be checked (no verdict).
func TestWholeOnlyChallenge(t *testing.T) {
	full := filepath.Join(t.TempDir(), "gemma3n.gguf")
	if err := engine.Synth(context.Background(), full, engine.SynthSpec{Arch: "gemma3n", Size: "tiny", Type: "f32", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	cid, err := shards.FileCID(full)
	if err != nil {
		t.Fatal(err)
	}
	n := load(t, full).Info().Layers
	for _, scale := range []float32{1, 1.02} {
		lr := newLiar(t, full)
		if scale != 1 {
			lr.tamper = func(_ *Request, _ int, out []float32) []float32 {
				for i := range out {
					out[i] *= scale
				}
				return out
			}
		}
		h := newHost(t)
		link(h, lr.h)
		ck := newChecker(h, newFileRef(t, cid.String()).add(0, n, full))
		rep, err := ck.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid.String(), Start: 0, End: n})
		var fe *FailError
		switch {
		case scale == 1 && (err != nil || !slices.Equal(rep.Checked, []int{n - 1}) || rep.WorstRelErr != 0):
			t.Fatalf("an honest gemma3n peer: %v, report %+v", err, rep)
		case scale != 1 && (!errors.As(err, &fe) || !banned(ck, lr)):
			t.Fatalf("logits 2%% off: %v, want a failure and a ban", err)
		}
		if scale == 1 {
			if _, err := ck.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid.String(), Start: 0, End: 2}); !errors.Is(err, ErrNoReference) {
				t.Fatalf("a claim of layers [0,2) of gemma3n: %v, want ErrNoReference", err)
			}
		}
	}
}

func banned(ck *Checker, lr *liar) bool {
	b, _ := ck.Trust.Banned(lr.h.ID())
	return b
}

// synthLoaded writes the synthetic model of arch, size and type (seed 1)
// and loads it with opts for the test's duration.
func synthLoaded(t *testing.T, arch, size, typ string, opts engine.Options) (full, cid string, m *engine.Model) {
	t.Helper()
	full = filepath.Join(t.TempDir(), arch+"-"+size+"-"+typ+".gguf")
	if err := engine.Synth(context.Background(), full, engine.SynthSpec{Arch: arch, Size: size, Type: typ, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := shards.FileCID(full)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = engine.Load(context.Background(), full, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return full, c.String(), m
}
