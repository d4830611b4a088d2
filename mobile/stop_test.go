package mobile

import (
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestStopTwiceThenStart: an app stops its node from two threads (a
// service's onDestroy and a view model's onCleared) and the second then
// starts a new node on the same data dir: the second Stop returns only
// once the node has stopped, so the new Start finds the data dir free.
func TestStopTwiceThenStart(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		m, err := Start(phoneJSON(t), dir, nil)
		if err != nil {
			t.Fatalf("run %d: Start: %v", i, err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Stop()
		}()
		for !m.isStopped() {
			runtime.Gosched() // until the first Stop is under way
		}
		if err := m.Stop(); err != nil {
			t.Fatalf("run %d: second Stop: %v", i, err)
		}
		again, err := Start(phoneJSON(t), dir, nil)
		wg.Wait()
		if err != nil {
			if strings.Contains(err.Error(), "is used by") {
				t.Fatalf("run %d: Start right after Stop returned: %v", i, err)
			}
			t.Fatal(err)
		}
		again.Stop()
	}
}
