package engine

import (
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

const testSlices = true

func sliceFile(t *testing.T, in, out string, a, b int) {
	t.Helper()
	mi, err := shards.Slice(in, out, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if mi.LayerRange != [2]int{a, b} {
		t.Fatalf("slice [%d,%d) holds layers %v", a, b, mi.LayerRange)
	}
}
