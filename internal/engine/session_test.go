package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestConcurrentSessionsMatchAlone(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "tiny", "f32"), Options{Slots: 4, Context: 256})
	reqs := make([]Request, 4)
	for i := range reqs {
		reqs[i] = Request{
			Messages:  []Message{{Role: "user", Content: fmt.Sprintf("question number %d about the swarm", i)}},
			Sampling:  SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(i)},
			MaxTokens: 16,
		}
	}
	alone := make([][]int32, len(reqs))
	for i, r := range reqs {
		res, err := m.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res.Tokens
	}
	together := make([][]int32, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := m.Generate(context.Background(), r, nil)
			together[i], errs[i] = res.Tokens, err
		}()
	}
	wg.Wait()
	for i := range reqs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if fmt.Sprint(alone[i]) != fmt.Sprint(together[i]) {
			t.Errorf("request %d: concurrent tokens %v, alone %v", i, together[i], alone[i])
		}
	}
}

func TestCapacityAndTTL(t *testing.T) {
	m := loadT(t, synthFile(t, "llama", "tiny", "f32"), Options{Slots: 2, Context: 64, TTL: time.Minute})
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	m.mu.Lock()
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m.mu.Unlock()
	s1, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSession(); !errors.Is(err, ErrCapacity) {
		t.Fatalf("third session: %v, want ErrCapacity", err)
	}
	if _, err := s1.RunRange(context.Background(), 0, 4, []int32{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(30 * time.Second)
	mu.Unlock()
	if _, err := s1.RunRange(context.Background(), 0, 4, []int32{4}, nil); err != nil { // s1 stays fresh
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(45 * time.Second) // s2 idle 75s > TTL, s1 45s
	mu.Unlock()
	s3, err := m.NewSession()
	if err != nil {
		t.Fatalf("session after expiry: %v", err)
	}
	defer s3.Close()
	if _, err := s2.RunRange(context.Background(), 0, 4, []int32{1}, nil); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("expired session: %v, want ErrSessionClosed", err)
	}
	if open, slots := m.Sessions(); open != 2 || slots != 2 {
		t.Fatalf("sessions %d/%d, want 2/2", open, slots)
	}
	// a full context is an error, not a crash
	if _, err := s1.RunRange(context.Background(), 0, 4, make([]int32, 64), nil); !errors.Is(err, ErrContextFull) {
		t.Fatalf("overfull session: %v, want ErrContextFull", err)
	}
	s1.Close()
	s1.Close()
	if _, err := s1.RunRange(context.Background(), 0, 4, []int32{1}, nil); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("closed session: %v", err)
	}
}

// TestTruncateReplay: after truncating a session to a prefix, replaying the
// same tokens gives bit-identical logits (what a pipeline does after a stage
// fails over).
func TestTruncateReplay(t *testing.T) {
	for _, arch := range Architectures {
		m := loadT(t, synthFile(t, arch, "tiny", "f32"), Options{Context: 128})
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		N := m.Info().Layers
		if _, err := s.RunRange(context.Background(), 0, N, splitPrompt, nil); err != nil {
			t.Fatal(err)
		}
		steps := []int32{5, 6, 7, 8}
		var first [][]float32
		for _, id := range steps {
			l, err := s.RunRange(context.Background(), 0, N, []int32{id}, nil)
			if err != nil {
				t.Fatal(err)
			}
			first = append(first, l)
		}
		keep := len(splitPrompt) + 1
		if _, recurrent := m.a.(isolatedArch); recurrent {
			// LFM2's state goes back only to 0 (TestLFM2Sessions): refused
			// with the reason, then replayed from there as it first ran.
			if err := s.Truncate(keep); !errors.Is(err, ErrBadInput) {
				t.Fatalf("%s: truncate a recurrent state to %d: %v", arch, keep, err)
			}
			if err := s.Truncate(0); err != nil {
				t.Fatal(err)
			}
			for _, in := range [][]int32{splitPrompt, steps[:1]} {
				if _, err := s.RunRange(context.Background(), 0, N, in, nil); err != nil {
					t.Fatal(err)
				}
			}
		} else if err := s.Truncate(keep); err != nil {
			t.Fatal(err)
		}
		if s.Pos() != keep {
			t.Fatalf("pos %d after truncate, want %d", s.Pos(), keep)
		}
		for i, id := range steps[1:] {
			l, err := s.RunRange(context.Background(), 0, N, []int32{id}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bitEqual(l, first[i+1]) {
				t.Fatalf("%s: replayed step %d differs", arch, i+1)
			}
		}
		if err := s.Truncate(1000); !errors.Is(err, ErrBadInput) {
			t.Fatalf("truncate beyond end: %v", err)
		}
		s.Close()
	}
}

func TestGenerate(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "tiny", "f32"), Options{Context: 256})
	think := false
	var streamed string
	var n int
	res, err := m.Generate(context.Background(), Request{
		Messages:  []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello there"}},
		Think:     &think,
		MaxTokens: 8,
	}, func(tk Token) error { streamed += tk.Text; n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	mt := res.Metrics
	if mt.PromptTokens == 0 || mt.GeneratedTokens == 0 || mt.GeneratedTokens > 8 || mt.TTFT <= 0 || mt.PrefillTPS <= 0 {
		t.Fatalf("bad metrics %+v", mt)
	}
	if res.Done == DoneLength && mt.DecodeTPS <= 0 {
		t.Fatalf("no decode rate: %+v", mt)
	}
	if streamed != res.Text {
		t.Fatalf("streamed %q, result %q", streamed, res.Text)
	}
	t.Logf("%d tokens %q done=%s metrics=%+v", len(res.Tokens), res.Text, res.Done, mt)

	// cancellation
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := 0
	res, err = m.Generate(ctx, Request{Prompt: "count with me", MaxTokens: 100}, func(Token) error {
		if k++; k == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || res.Done != DoneCancel || len(res.Tokens) != 3 {
		t.Fatalf("cancel: err %v done %s tokens %d", err, res.Done, len(res.Tokens))
	}
	if open, _ := m.Sessions(); open != 0 {
		t.Fatalf("%d sessions left open", open)
	}
}

func TestStopper(t *testing.T) {
	cases := []struct {
		stops  []string
		pieces []string
		want   string
		hit    bool
	}{
		{nil, []string{"ab", "cd"}, "abcd", false},
		{[]string{"STOP"}, []string{"hello S", "TO", "P world"}, "hello ", true},
		{[]string{"STOP"}, []string{"hello S", "T", "x"}, "hello STx", false},
		{[]string{"\n\n", "END"}, []string{"a\n", "\nb"}, "a", true},
	}
	for i, c := range cases {
		s := Stopper{Stops: c.stops}
		var got string
		hit := false
		for _, p := range c.pieces {
			out, stop := s.Add(p)
			got += out
			if stop {
				hit = true
				break
			}
		}
		if !hit {
			got += s.Flush("")
		}
		if got != c.want || hit != c.hit {
			t.Errorf("case %d: got %q hit %v, want %q %v", i, got, hit, c.want, c.hit)
		}
	}
}

func TestModelClose(t *testing.T) {
	m, err := Load(context.Background(), synthFile(t, "qwen2", "tiny", "f32"), Options{Threads: 1, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.RunRange(context.Background(), 0, 4, []int32{1}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("run after close: %v", err)
	}
	if _, err := m.NewSession(); !errors.Is(err, ErrClosed) {
		t.Fatalf("session after close: %v", err)
	}
	s.Close()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Load(ctx, synthFile(t, "qwen2", "tiny", "f32"), Options{Threads: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("load with cancelled ctx: %v", err)
	}
}
