package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/node/client"
)

// pullWait bounds `pull` when no --timeout is given: a multi-GB model on
// a slow link takes long, and an interrupted pull resumes.
const pullWait = 24 * time.Hour

func runPull(ctx context.Context, e *env, args []string) error {
	fs := e.flags("pull")
	pos, err := e.parse(fs, commands["pull"].args, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"pull: want one model: hf.co/OWNER/REPO:QUANT, hf.co/OWNER/REPO/FILE.gguf, or a short name such as qwen3:0.6b"}
	}
	wait := pullWait
	if e.timeout > 0 {
		wait = e.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	bar := newTaskBar(e.stderr, e.stderrTTY)
	// HF_TOKEN is the user's: it goes to the daemon with the request, which
	// sends it to the hub only.
	req := client.PullRequest{Model: pos[0], Token: os.Getenv("HF_TOKEN"), Stream: true}
	p, err := e.client.Pull(ctx, req, bar.show)
	bar.done()
	if err != nil {
		return e.explain(ctx, err)
	}
	if e.json {
		return printJSON(e.stdout, p)
	}
	what := "pulled"
	if p.Already {
		what = "already here (same size and sha256), nothing downloaded:"
	}
	fmt.Fprintf(e.stdout, "%s %s\n  file   %s (%s, %s)\n  model  %s  %s, %d layers  %s\n", what, p.Model, p.Path, p.Quant, mib(p.Size), p.CID, p.Arch, p.Layers, p.Name)
	fmt.Fprintf(e.stdout, "serve it:\n  swarmctl role add reasoner %s\n  swarmctl shard add %s:0-%d\n", p.Path, p.Path, p.Layers)
	return nil
}

// taskBar shows a task's progress: on a terminal, one line rewritten in
// place at most ten times a second; otherwise a plain line per stage and
// every tenth of the way.
type taskBar struct {
	w     io.Writer
	tty   bool
	last  time.Time
	stage string
	tenth int64
	shown bool
	rate  rateMeter
}

func newTaskBar(w io.Writer, tty bool) *taskBar { return &taskBar{w: w, tty: tty, tenth: -1} }

func (b *taskBar) show(t client.Task) {
	b.rate.add(t.Done)
	if !b.tty {
		tenth := int64(-1)
		if t.Total > 0 {
			tenth = t.Done * 10 / t.Total
		}
		if t.Stage != b.stage || tenth != b.tenth || t.State != "running" {
			b.stage, b.tenth = t.Stage, tenth
			fmt.Fprintf(b.w, "%s %s: %s\n", t.Kind, t.State, b.line(t))
		}
		return
	}
	if t.State == "running" && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last, b.shown = time.Now(), true
	fmt.Fprintf(b.w, "\r\033[K%s", b.line(t))
}

// done clears the terminal line.
func (b *taskBar) done() {
	if b.tty && b.shown {
		fmt.Fprint(b.w, "\r\033[K")
	}
}

func (b *taskBar) line(t client.Task) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %s", t.Stage, t.Name)
	if t.Error != "" {
		fmt.Fprintf(&s, ": %s", t.Error)
		return s.String()
	}
	if t.Unit != "bytes" {
		fmt.Fprintf(&s, " %d", t.Done)
		if t.Total > 0 {
			fmt.Fprintf(&s, "/%d", t.Total)
		}
		return s.String()
	}
	if t.Total > 0 {
		frac := min(float64(t.Done)/float64(t.Total), 1)
		const width = 24
		full := int(frac * width)
		fmt.Fprintf(&s, " %3.0f%% [%s%s] %s/%s", frac*100, strings.Repeat("#", full), strings.Repeat(".", width-full), mib(t.Done), mib(t.Total))
		if r := b.rate.perSecond(); r > 0 && t.Done < t.Total {
			eta := time.Duration(float64(t.Total-t.Done) / r * float64(time.Second)).Round(time.Second)
			fmt.Fprintf(&s, " %s/s ETA %s", mib(int64(r)), eta)
		}
	} else if t.Done > 0 {
		fmt.Fprintf(&s, " %s", mib(t.Done))
	}
	return s.String()
}

// rateMeter is a count's rate over the last few seconds.
type rateMeter struct {
	at    []time.Time
	count []int64
}

func (m *rateMeter) add(n int64) {
	now := time.Now()
	m.at, m.count = append(m.at, now), append(m.count, n)
	for len(m.at) > 2 && now.Sub(m.at[0]) > 5*time.Second {
		m.at, m.count = m.at[1:], m.count[1:]
	}
}

func (m *rateMeter) perSecond() float64 {
	if len(m.at) < 2 {
		return 0
	}
	d := m.at[len(m.at)-1].Sub(m.at[0]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(m.count[len(m.count)-1]-m.count[0]) / d
}
