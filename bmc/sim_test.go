package bmc_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.bug.st/serial"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/bmc/bmcsim"
)

// startBoard boots an emulated board in a temp dir, stopped at cleanup. It
// fails (never skips, unless -short) when the toolchain is missing.
func startBoard(t *testing.T) *bmcsim.Board {
	t.Helper()
	if testing.Short() {
		t.Skip("emulated board tests skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	board, err := bmcsim.Start(ctx, t.TempDir())
	if errors.Is(err, bmcsim.ErrToolsMissing) {
		t.Fatalf("%v", err)
	}
	if err != nil {
		t.Fatalf("start emulated board: %v", err)
	}
	t.Cleanup(func() {
		board.Close()
		if t.Failed() {
			t.Logf("harness log:\n%s", board.Log())
		}
	})
	return board
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("BMC_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func newKey(t *testing.T) []byte {
	k := make([]byte, bmc.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// openBridge opens a bridge on the board with fast reconnects.
func openBridge(t *testing.T, path string, key []byte) *bmc.Bridge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bmc.Open(ctx, path, &bmc.Options{
		Key:        key,
		MaxBackoff: 200 * time.Millisecond,
		Timeout:    5 * time.Second, // generous: the test host may be loaded
		Logger:     testLogger(t),
	})
	if err != nil {
		t.Fatalf("open bridge: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rawPort is a bare serial connection for conformance tests that bypass the
// bridge: it sends a line and returns the next line, whatever it is.
type rawPort struct {
	t    *testing.T
	port serial.Port
	sc   *bufio.Scanner
	ch   chan string
}

func openRaw(t *testing.T, path string) *rawPort {
	t.Helper()
	p, err := serial.Open(path, &serial.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	r := &rawPort{t: t, port: p, ch: make(chan string, 512)}
	go func() {
		sc := bufio.NewScanner(p)
		for sc.Scan() {
			r.ch <- strings.TrimSuffix(sc.Text(), "\r")
		}
		close(r.ch)
	}()
	t.Cleanup(func() { p.Close() })
	// Sync: end any partial line, then wait for our own PING token.
	r.send("\nPING sync0")
	for {
		if l := r.next(); strings.HasSuffix(l, " sync0") {
			return r
		}
	}
}

func (r *rawPort) send(line string) {
	r.t.Helper()
	if _, err := r.port.Write([]byte(line + "\n")); err != nil {
		r.t.Fatalf("write %q: %v", line, err)
	}
}

func (r *rawPort) next() string {
	r.t.Helper()
	select {
	case l, ok := <-r.ch:
		if !ok {
			r.t.Fatal("port closed")
		}
		return l
	case <-time.After(10 * time.Second):
		r.t.Fatal("no reply from the board within 10s")
	}
	return ""
}

// cmd sends one line and returns the one reply line.
func (r *rawPort) cmd(line string) string {
	r.t.Helper()
	r.send(line)
	return r.next()
}
