package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// sliceHole is a stage slice [a,b) with tensors dropped, and what its
// refusal must name.
type sliceHole struct {
	a, b int
	drop []string
	want string
}

// checkSlices loads every stage slice of the 4-layer model full, each
// holding its layers, the embedding in the first and the head in the last,
// and has each of holes refused at Load as ErrMissingLayers naming what it
// lacks.
func checkSlices(t *testing.T, full string, holes []sliceHole) {
	t.Helper()
	const n = 4
	for a := 0; a < n; a++ {
		for b := a + 1; b <= n; b++ {
			p := filepath.Join(t.TempDir(), fmt.Sprintf("%d-%d.gguf", a, b))
			sliceFile(t, full, p, a, b)
			m, err := Load(context.Background(), p, Options{Threads: 1, Slots: 1, Context: 64})
			if err != nil {
				t.Fatalf("slice [%d,%d): %v", a, b, err)
			}
			in := m.Info()
			if in.LayerRange != [2]int{a, b} || in.HasEmbedding != (a == 0) || in.HasHead != (b == n) {
				t.Errorf("slice [%d,%d): layers %v, embedding %v, head %v", a, b, in.LayerRange, in.HasEmbedding, in.HasHead)
			}
			m.Close()
		}
	}
	for _, c := range holes {
		p := filepath.Join(t.TempDir(), "slice.gguf")
		sliceFile(t, full, p, c.a, c.b)
		q := filepath.Join(t.TempDir(), "holed.gguf")
		dropTensors(t, p, q, c.drop...)
		_, err := Load(context.Background(), q, Options{Threads: 1})
		if !errors.Is(err, ErrMissingLayers) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("slice [%d,%d) without %v: %v, want ErrMissingLayers naming %s", c.a, c.b, c.drop, err, c.want)
		}
	}
}
