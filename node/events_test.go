package node

import (
	"encoding/json"
	"testing"
)

func TestEventHubDropsOldestForASlowReader(t *testing.T) {
	var n Node
	events, stop := n.Subscribe()
	for i := range eventBuffer + 10 {
		n.events.publish("task", i)
	}
	var got []int
	dropped := 0
	for len(got) == 0 || got[len(got)-1] != eventBuffer+9 {
		ev := <-events
		if ev.Type == "dropped" {
			var d int
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			dropped += d
			continue
		}
		var i int
		if err := json.Unmarshal(ev.Data, &i); err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	// The reader goroutine may have taken one event off before the buffer
	// filled; the rest arrive in order, and the lost ones are counted.
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("events out of order: %v", got)
		}
	}
	if dropped == 0 || dropped+len(got) != eventBuffer+10 {
		t.Fatalf("dropped %d and got %d of %d", dropped, len(got), eventBuffer+10)
	}
	stop()
	stop()             // idempotent
	for range events { // the channel closes after stop
	}
	n.events.publish("task", 1) // no subscribers: nothing blocks
}
