package bmc_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmswarm/llmswarm/bmc"
)

// fakeBoard answers on the master side of a pty with scripted noise, so the
// bridge's noise skipping, timeout recovery and reboot handling can be
// tested deterministically, without the emulator.
type fakeBoard struct {
	master *os.File
	slave  string

	mu      sync.Mutex
	hbs     int
	pending []string // lines to send before the next reply
}

func newFakeBoard(t *testing.T) *fakeBoard {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty support: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var n int
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	err2 := rc.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if err != nil || err2 != nil {
		t.Fatalf("pty: %v %v", err, err2)
	}
	f := &fakeBoard{master: m, slave: fmt.Sprintf("/dev/pts/%d", n)}
	go f.serve()
	return f
}

func (f *fakeBoard) write(lines ...string) {
	for _, l := range lines {
		f.master.Write([]byte(l + "\r\n"))
	}
}

func (f *fakeBoard) serve() {
	noise := []string{"\x00\xff\xfe garbage", "#debug 1 2 3", strings.Repeat("x", 300), "OK", "PONG 1 not-our-token"}
	sc := bufio.NewScanner(f.master)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		f.mu.Lock()
		pre := f.pending
		f.pending = nil
		f.mu.Unlock()
		f.write(pre...)
		f.write(noise...)
		w := strings.Fields(line)
		switch {
		case len(w) == 0:
			f.write("ERR empty")
		case w[0] == "PING" && len(w) == 2:
			f.write("PONG 1234 " + w[1])
		case w[0] == "PING":
			f.write("PONG 1234")
		case w[0] == "INFO":
			f.write("INFO proto=1 fw=fake boot=9 key=1 nmax=32 pmax=32")
		case w[0] == "HB":
			f.mu.Lock()
			f.hbs++
			n := f.hbs
			if n == 1 {
				// Swallow the first heartbeat; its late reply arrives ahead
				// of whatever the host sends next.
				f.pending = append(f.pending, "OK 999")
			}
			f.mu.Unlock()
			if n > 1 {
				f.write(fmt.Sprintf("OK %d", n))
			}
		case w[0] == "STAT":
			f.write("READY fw=fake boot=10")
		default:
			f.write("ERR unknown")
		}
	}
}

func TestBridgeSkipsNoiseAndResyncs(t *testing.T) {
	t.Parallel()
	f := newFakeBoard(t)
	ctx := ctxT(t, 20*time.Second)
	b, err := bmc.Open(ctx, f.slave, &bmc.Options{Timeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Boot() != 9 {
		t.Fatalf("boot %d", b.Boot())
	}
	for i := 0; i < 5; i++ {
		if _, err := b.Ping(ctx); err != nil {
			t.Fatalf("ping through noise: %v", err)
		}
	}
	h := bmc.HandleFor([]byte("n"))
	if _, err := b.Heartbeat(ctx, h, 0); !errors.Is(err, bmc.ErrTimeout) {
		t.Fatalf("swallowed heartbeat: %v, want ErrTimeout", err)
	}
	// The late "OK 999" must not be taken as the next request's reply.
	seq, err := b.Heartbeat(ctx, h, 0)
	if err != nil || seq != 2 {
		t.Fatalf("heartbeat after timeout: seq %d, %v; want 2", seq, err)
	}
	if _, err := b.Stat(ctx); !errors.Is(err, bmc.ErrRebooted) {
		t.Fatalf("reply-less reboot: %v, want ErrRebooted", err)
	}
	if e := waitEvent(t, b, bmc.EventRebooted, time.Second); e.Boot != 10 || b.Boot() != 10 {
		t.Fatalf("reboot event %+v, bridge boot %d", e, b.Boot())
	}
	if _, err := b.Info(ctx); err != nil {
		t.Fatalf("request after reboot: %v", err)
	}
	var de *bmc.DeviceError
	if _, err := b.ClearNodes(ctx); !errors.As(err, &de) || de.Code != "unknown" {
		t.Fatalf("ERR reply: %v", err)
	}
}
