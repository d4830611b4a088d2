package mobile

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/nodetest"
)

// lines is a Logger that keeps what it is sent; while gate is open (not
// nil), each call waits for it.
type lines struct {
	mu   sync.Mutex
	got  []string
	gate chan struct{}
}

func (l *lines) Log(level, line string) error {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		<-gate
	}
	l.mu.Lock()
	l.got = append(l.got, level+" "+line)
	l.mu.Unlock()
	return errors.New("a logger's error is dropped")
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func (l *lines) wait(t *testing.T, n int) []string {
	t.Helper()
	nodetest.Eventually(t, 10*time.Second, fmt.Sprintf("%d log lines", n), func() bool { return len(l.all()) >= n })
	return l.all()
}

func TestLogLines(t *testing.T) {
	out := &lines{}
	ll := newLineLog(out)
	log := ll.slogger().With("peer", "12D3Koo").WithGroup("moa")
	log.Debug("not sent")
	log.Info("agent answered", "role", "critic", "ms", 12.5, slog.Group("sampling", "seed", 7))
	log.Warn("odd input", "text", `a "quoted" = word`, "empty", "", "err", errors.New("boom"))
	log.Error("with a group", slog.Group("", "flat", true))
	got := out.wait(t, 3)
	ll.close()
	ll.close()
	log.Info("after close: dropped quietly")
	want := []string{
		`INFO agent answered peer=12D3Koo moa.role=critic moa.ms=12.5 moa.sampling.seed=7`,
		`WARN odd input peer=12D3Koo moa.text="a \"quoted\" = word" moa.empty="" moa.err=boom`,
		`ERROR with a group peer=12D3Koo moa.flat=true`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLogDrops: a logger that falls behind loses lines, counted, and the
// peer never waits for it.
func TestLogDrops(t *testing.T) {
	out := &lines{gate: make(chan struct{})}
	ll := newLineLog(out)
	log := ll.slogger()
	const sent = 3 * logBuffer
	for i := range sent {
		log.Info("line", "i", i) // would block here if the logger could stall the peer
	}
	out.mu.Lock()
	close(out.gate)
	out.gate = nil
	out.mu.Unlock()
	nodetest.Eventually(t, 10*time.Second, "the queue drained", func() bool { return len(ll.lines) == 0 })
	log.Info("last")
	var got []string
	nodetest.Eventually(t, 10*time.Second, "the last line", func() bool {
		got = out.all()
		return got[len(got)-1] == "INFO last"
	})
	ll.close()
	var dropped, kept int
	for _, l := range got {
		var n int
		if _, err := fmt.Sscanf(l, "WARN mobile: %d log lines dropped", &n); err == nil {
			dropped += n
		} else if strings.HasPrefix(l, "INFO line i=") {
			kept++
		}
	}
	if dropped == 0 || kept+dropped != sent {
		t.Fatalf("%d kept + %d dropped, want %d in all, some dropped", kept, dropped, sent)
	}
}

// TestNodeLogs: a started node's log reaches the app's Logger.
func TestNodeLogs(t *testing.T) {
	out := &lines{}
	phone := startPhone(t, phoneJSON(t), out)
	if err := phone.ReportPower(5, false, ""); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "the refusal logged", func() bool {
		for _, l := range out.all() {
			if strings.HasPrefix(l, "WARN not taking new work why=") {
				return true
			}
		}
		return false
	})
}
