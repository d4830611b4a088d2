package engine

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/ml"
)

// Benchmarks run on $ENGINE_BENCH_MODEL (e.g. a 0.6b-shape synthetic model
// from `swarmd model synth --size 0.6b --type q8_0 -o /tmp/m.gguf`), or on a
// synthetic "small" q8_0 model. Threads: $ENGINE_BENCH_THREADS (default 2).
//
//	ENGINE_BENCH_MODEL=/tmp/m.gguf go test -run XXX -bench . -benchtime 3x ./internal/engine/
func benchModel(b *testing.B) *Model {
	b.Helper()
	path, threads := benchEnv(b)
	return loadT(b, path, Options{Threads: threads, Slots: 1, Context: 1024})
}

// benchEnv is the model file and thread count benchmarks run with.
func benchEnv(b *testing.B) (path string, threads int) {
	b.Helper()
	path = os.Getenv("ENGINE_BENCH_MODEL")
	if path == "" {
		path = synthFile(b, "qwen3", "small", "q8_0")
	}
	threads = 2
	if s := os.Getenv("ENGINE_BENCH_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	return path, threads
}

func benchPrompt(m *Model, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*7919 + 13) % (m.Info().VocabSize * 9 / 10))
	}
	return p
}

// BenchmarkPrefill32 reports prompt tokens per second for a 32-token prompt.
func BenchmarkPrefill32(b *testing.B) {
	m := benchModel(b)
	prompt := benchPrompt(m, 32)
	N := m.Info().Layers
	b.ResetTimer()
	for range b.N {
		s, err := m.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.RunRange(context.Background(), 0, N, prompt, nil); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkDecode reports decode tokens per second (one token per graph),
// after a 32-token prompt, 64 tokens per iteration.
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	prompt := benchPrompt(m, 32)
	N := m.Info().Layers
	const gen = 64
	var decodeSec float64
	var build, compute int64
	for range b.N {
		s, err := m.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.RunRange(context.Background(), 0, N, prompt, nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b0, c0 := m.statBuild.Load(), m.statCompute.Load()
		for range gen {
			if l, err = s.RunRange(context.Background(), 0, N, []int32{Greedy(l)}, nil); err != nil {
				b.Fatal(err)
			}
		}
		decodeSec += time.Since(start).Seconds()
		build += m.statBuild.Load() - b0
		compute += m.statCompute.Load() - c0
		s.Close()
	}
	b.ReportMetric(float64(gen*b.N)/decodeSec, "tok/s")
	// graph building in Go vs ggml compute, per token
	b.ReportMetric(float64(build)/1e6/float64(gen*b.N), "build-ms/tok")
	b.ReportMetric(float64(compute)/1e6/float64(gen*b.N), "compute-ms/tok")
}

// BenchmarkSampler measures sampling from a vocabulary of Qwen's size.
func BenchmarkSampler(b *testing.B) {
	logits := randomLogits(1, 151936)
	s := NewSampler(SamplerOptions{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1})
	hist := []int32{1, 2, 3, 4, 5}
	for b.Loop() {
		if _, err := s.Sample(logits, hist); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeOllama is the stock path (model.Forward with the model's own
// cache) on the same model, to separate engine overhead from ggml's speed.
func BenchmarkDecodeOllama(b *testing.B) {
	m := benchModel(b)
	cache := m.m.Config().Cache
	cache.Init(m.m.Backend(), ml.DTypeF16, 1, 1024, 512)
	defer cache.Close()
	prompt := benchPrompt(m, 32)
	const gen = 64
	var decodeSec float64
	for range b.N {
		if err := cache.Remove(0, 0, math.MaxInt32); err != nil {
			b.Fatal(err)
		}
		l := ollamaForward(b, m, prompt, 0)
		start := time.Now()
		for i := range gen {
			l = ollamaForward(b, m, []int32{Greedy(l)}, int32(32+i))
		}
		decodeSec += time.Since(start).Seconds()
	}
	b.ReportMetric(float64(gen*b.N)/decodeSec, "tok/s")
}

// BenchmarkDecodeStreams reports the aggregate decode rate of S sessions
// decoding at once (after a prompt of $ENGINE_BENCH_PROMPT tokens each,
// default 32; 32 tokens per session per iteration), batched and isolated
// (each session alone in its graphs, as before batching), side by side.
func BenchmarkDecodeStreams(b *testing.B) {
	path, threads := benchEnv(b)
	for _, isolated := range []bool{false, true} {
		m := loadT(b, path, Options{Threads: threads, Slots: 8, Context: 1024, Isolated: isolated})
		for _, streams := range []int{1, 2, 4, 8} {
			name := fmt.Sprintf("batched/streams=%d", streams)
			if isolated {
				name = fmt.Sprintf("isolated/streams=%d", streams)
			}
			b.Run(name, func(b *testing.B) {
				const gen = 32
				plen := 32
				if s := os.Getenv("ENGINE_BENCH_PROMPT"); s != "" {
					plen, _ = strconv.Atoi(s)
				}
				prompt := benchPrompt(m, plen)
				N := m.Info().Layers
				var sec float64
				for range b.N {
					sess := make([]*Session, streams)
					logits := make([][]float32, streams)
					for i := range sess {
						s, err := m.NewSession()
						if err != nil {
							b.Fatal(err)
						}
						sess[i] = s
						if logits[i], err = s.RunRange(context.Background(), 0, N, prompt, nil); err != nil {
							b.Fatal(err)
						}
					}
					start := time.Now()
					var wg sync.WaitGroup
					for i, s := range sess {
						wg.Add(1)
						go func() {
							defer wg.Done()
							l := logits[i]
							var err error
							for range gen {
								if l, err = s.RunRange(context.Background(), 0, N, []int32{Greedy(l)}, nil); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					sec += time.Since(start).Seconds()
					for _, s := range sess {
						s.Close()
					}
				}
				b.ReportMetric(float64(gen*streams*b.N)/sec, "tok/s")
			})
		}
	}
}
