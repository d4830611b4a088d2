package bmc_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if goroutines outlive the tests: every Bridge,
// link reader and board must be torn down by Close.
func TestMain(m *testing.M) {
	base := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > base {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			if strings.Contains(stacks, "llmswarm/bmc") {
				fmt.Fprintf(os.Stderr, "leaked goroutines (%d > %d):\n%s", n, base, stacks)
				code = 1
			}
		}
	}
	os.Exit(code)
}
