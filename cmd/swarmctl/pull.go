package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/cli"
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

// taskBar shows a task's progress on stderr (cli.Progress).
type taskBar struct{ p cli.Progress }

func newTaskBar(w io.Writer, tty bool) *taskBar { return &taskBar{p: cli.Progress{W: w, TTY: tty}} }

// show shows a running or finished task; a failed one is left to the
// error the pull returns, which says why once.
func (b *taskBar) show(t client.Task) {
	if t.State == "failed" {
		return
	}
	label := t.Kind + " " + t.State + ": "
	if t.Stage != "" {
		label += t.Stage + " "
	}
	b.p.Show(label+t.Name, t.Done, t.Total, t.Unit == "bytes")
}

func (b *taskBar) done() { b.p.Done() }
