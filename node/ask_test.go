package node

import (
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/client"
)

// TestStopCutter: streamed text stops before the first stop string, even
// when the string spans pieces; nothing after it, and nothing that could
// be its start, reaches the caller early.
func TestStopCutter(t *testing.T) {
	cases := []struct {
		name   string
		pieces []string
		stops  []string
		want   string
		hit    bool
	}{
		{"no stop", []string{"Hello", " world"}, []string{"\n\n"}, "Hello world", false},
		{"inside a piece", []string{"one two. three"}, []string{"."}, "one two", true},
		{"across pieces", []string{"one <", "/", "end> two"}, []string{"</end>"}, "one ", true},
		{"false start released", []string{"a <", "b> c"}, []string{"</end>"}, "a <b> c", false},
		{"held prefix at the end", []string{"tail </en"}, []string{"</end>"}, "tail </en", false},
		{"earliest of several", []string{"x END y STOP"}, []string{"STOP", "END"}, "x ", true},
		{"stop at the start", []string{"STOP now"}, []string{"STOP"}, "", true},
		{"overlapping prefixes", []string{"aaa", "ab"}, []string{"aab"}, "aa", true},
		{"multibyte", []string{"café ", "☕", " fin"}, []string{"☕"}, "café ", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var streamed strings.Builder
			cancelled := false
			c := newStopCutter(tc.stops, func(s string) {
				streamed.WriteString(s)
				for _, st := range tc.stops {
					if strings.Contains(streamed.String(), st) {
						t.Fatalf("stop %q reached the caller: %q", st, streamed.String())
					}
				}
			}, func() { cancelled = true })
			for _, p := range tc.pieces {
				c.add(p)
			}
			c.flush()
			text, _, hit := c.result()
			if text != tc.want || streamed.String() != tc.want || hit != tc.hit || cancelled != tc.hit {
				t.Fatalf("text %q streamed %q hit %v cancelled %v; want %q hit %v", text, streamed.String(), hit, cancelled, tc.want, tc.hit)
			}
		})
	}
}

func TestSeedFor(t *testing.T) {
	given := client.Seed(42)
	if seedFor(1, &given) != 42 || seedFor(0, &given) != 42 || seedFor(0, nil) != 0 {
		t.Fatal("a given seed must be kept, and greedy decoding needs none")
	}
	if a, b := seedFor(0.7, nil), seedFor(0.7, nil); a == b {
		t.Fatalf("two fresh seeds are equal: %d", a)
	}
}
