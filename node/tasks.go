package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// Task tracking: every long job a user waits for (a pull, a shard fetch,
// a model load) is a task. Its changes go to the event hub as "task"
// events, at most taskEvery apart except the first and the last, and
// GET /v1/swarm/status lists the running ones and those that ended less
// than taskKeep ago.
const (
	taskEvery = 100 * time.Millisecond
	taskKeep  = time.Minute
)

// taskList is the peer's tasks.
type taskList struct {
	mu    sync.Mutex
	next  int
	tasks []*task
	pub   func(typ string, v any)
	now   func() time.Time
}

// task is one running job; its methods are safe for concurrent use.
type task struct {
	l     *taskList
	t     client.Task // guarded by l.mu
	sent  time.Time
	end   time.Time
	watch func(client.Task) // sees what is published, e.g. the API call that asked for the task
}

// taskWatchKey carries, in a request's context, what sees the tasks the
// request runs (WithTaskWatch).
type taskWatchKey struct{}

// WithTaskWatch returns ctx carrying watch: every task (a load, a fetch, a
// slice) that a call given ctx runs is shown to watch as it is published
// (client.Task), from its start to its end, so that the caller can show
// progress (POST /v1/swarm/roles and /v1/swarm/shards with stream).
func WithTaskWatch(ctx context.Context, watch func(client.Task)) context.Context {
	return context.WithValue(ctx, taskWatchKey{}, watch)
}

// startIn is start, watched by ctx's watch if it carries one
// (WithTaskWatch).
func (l *taskList) startIn(ctx context.Context, kind, name, unit string, total int64) *task {
	watch, _ := ctx.Value(taskWatchKey{}).(func(client.Task))
	return l.startWatched(kind, name, unit, total, watch)
}

// start begins a task of kind on name, counting unit; total is 0 while
// unknown.
func (l *taskList) start(kind, name, unit string, total int64) *task {
	return l.startWatched(kind, name, unit, total, nil)
}

// startWatched is start, with watch seeing every change published, from
// the first.
func (l *taskList) startWatched(kind, name, unit string, total int64, watch func(client.Task)) *task {
	l.mu.Lock()
	now := l.clock()
	l.next++
	t := &task{l: l, watch: watch, t: client.Task{ID: fmt.Sprintf("%s-%d", kind, l.next), Kind: kind, Name: name,
		Unit: unit, Total: total, StartedMS: now.UnixMilli(), State: "running"}}
	l.tasks = append(l.tasks, t)
	l.expireLocked(now)
	l.mu.Unlock()
	t.publish(true)
	return t
}

// update sets the task's stage and counts; a stage change is always
// published, counts at most every taskEvery. total 0 keeps the known total.
func (t *task) update(stage string, done, total int64) {
	t.l.mu.Lock()
	force := stage != t.t.Stage
	t.t.Stage, t.t.Done = stage, done
	if total > 0 {
		t.t.Total = total
	}
	t.l.mu.Unlock()
	t.publish(force)
}

// finish ends the task, failed when err is not nil. Later calls change
// nothing.
func (t *task) finish(err error) {
	t.l.mu.Lock()
	if t.t.State != "running" {
		t.l.mu.Unlock()
		return
	}
	t.t.State = "done"
	if err != nil {
		t.t.State, t.t.Error = "failed", err.Error()
	} else if t.t.Total > 0 {
		t.t.Done = t.t.Total
	}
	t.end = t.l.clock()
	t.l.mu.Unlock()
	t.publish(true)
}

func (t *task) publish(force bool) {
	t.l.mu.Lock()
	now := t.l.clock()
	if !force && now.Sub(t.sent) < taskEvery {
		t.l.mu.Unlock()
		return
	}
	t.sent = now
	v, pub := t.t, t.l.pub
	t.l.mu.Unlock()
	if pub != nil {
		pub("task", v)
	}
	if t.watch != nil {
		t.watch(v)
	}
}

// snapshot is the task as it is now.
func (t *task) snapshot() client.Task {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	return t.t
}

// list is the running tasks and those that ended within taskKeep, oldest
// first.
func (l *taskList) list() []client.Task {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(l.clock())
	out := make([]client.Task, 0, len(l.tasks))
	for _, t := range l.tasks {
		out = append(out, t.t)
	}
	return out
}

func (l *taskList) expireLocked(now time.Time) {
	l.tasks = slices.DeleteFunc(l.tasks, func(t *task) bool {
		return t.t.State != "running" && now.Sub(t.end) > taskKeep
	})
}

func (l *taskList) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}
