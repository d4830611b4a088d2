package node

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func TestTaskList(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	var got []client.Task
	l := &taskList{now: func() time.Time { return now }, pub: func(typ string, v any) {
		if typ != "task" {
			t.Errorf("event type %q", typ)
		}
		mu.Lock()
		got = append(got, v.(client.Task))
		mu.Unlock()
	}}
	a := l.start("pull", "hf.co/x/y:Q8_0", "bytes", 0)
	a.update("download", 10, 100) // a new stage: published
	a.update("download", 20, 0)   // same stage, no time passed: held back
	now = now.Add(taskEvery)
	a.update("download", 30, 0) // taskEvery later: published
	b := l.start("load", "/m.gguf", "", 0)
	a.finish(nil)
	a.finish(errors.New("late")) // no change after the end
	b.finish(errors.New("out of memory"))
	want := []struct {
		id, state, stage string
		done, total      int64
	}{
		{"pull-1", "running", "", 0, 0},
		{"pull-1", "running", "download", 10, 100},
		{"pull-1", "running", "download", 30, 100},
		{"load-2", "running", "", 0, 0},
		{"pull-1", "done", "download", 100, 100},
		{"load-2", "failed", "", 0, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("published %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.id || g.State != w.state || g.Stage != w.stage || g.Done != w.done || g.Total != w.total {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
		}
	}
	if got[5].Error != "out of memory" {
		t.Errorf("failed task error %q", got[5].Error)
	}
	if n := len(l.list()); n != 2 {
		t.Fatalf("listed %d tasks, want the 2 that just ended", n)
	}
	now = now.Add(taskKeep + time.Second)
	c := l.start("fetch", "bafy:0-2", "bytes", 5)
	if ts := l.list(); len(ts) != 1 || ts[0].ID != "fetch-3" || c.snapshot().Total != 5 {
		t.Fatalf("after expiry: %+v", ts)
	}
}
