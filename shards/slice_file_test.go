package shards

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSliceFile: a slice cut from a user's file records its model's CID,
// exactly as the store's slices do (same bytes, same CID), whether cut from
// the full model or from a wider slice.
func TestSliceFile(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "model.gguf")
	mc := writeTransferModel(t, model, 4, 5)
	st := openStore(t, filepath.Join(tmp, "store"))
	if _, err := st.AddModel(model); err != nil {
		t.Fatal(err)
	}
	wide := filepath.Join(tmp, "wide.gguf")
	if _, err := SliceFile(model, wide, 0, 3); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   string
		a, b int
	}{
		{"from the model, first", model, 0, 2},
		{"from the model, last", model, 2, 4},
		{"from the model, middle", model, 1, 3},
		{"from a slice", wide, 1, 2},
		{"whole slice again", wide, 0, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(tmp, c.name+".gguf")
			mi, err := SliceFile(c.in, out, c.a, c.b)
			if err != nil {
				t.Fatal(err)
			}
			if mi.LayerRange != [2]int{c.a, c.b} {
				t.Fatalf("layers %v, want [%d,%d)", mi.LayerRange, c.a, c.b)
			}
			g, err := ReadGGUFFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if src := g.String(SourceCIDKey); src != mc {
				t.Fatalf("%s = %q, want the model's CID %s", SourceCIDKey, src, mc)
			}
			want, err := st.EnsureSlice(mc, c.a, c.b)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := FileCID(out); got.String() != want.CID {
				t.Fatalf("CID %s; the store's slice of the same range is %s", got, want.CID)
			}
		})
	}

	// A slice without provenance cannot say which model it belongs to.
	bare := filepath.Join(tmp, "bare.gguf")
	if _, err := Slice(model, bare, 0, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := SliceFile(bare, filepath.Join(tmp, "x.gguf"), 0, 1); !errors.Is(err, ErrNoSource) {
		t.Fatalf("slice of a slice without %s: %v, want ErrNoSource", SourceCIDKey, err)
	}
}

// TestSliceRefusesToOverwriteInput: the output may not be the input by any
// name; the input survives intact, and no temp file is left behind.
func TestSliceRefusesToOverwriteInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "model.gguf")
	writeTransferModel(t, in, 4, 6)
	orig, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.gguf")
	if err := os.Symlink("model.gguf", link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.gguf")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	for _, out := range []string{in, link, hard, "../model.gguf", "./../sub/../model.gguf"} {
		for name, f := range map[string]func(string, string, int, int) (ModelInfo, error){"Slice": Slice, "SliceFile": SliceFile} {
			if _, err := f(in, out, 0, 2); !errors.Is(err, ErrOverwriteInput) {
				t.Errorf("%s(%s, %s): %v, want ErrOverwriteInput", name, in, out, err)
			}
		}
	}
	if now, _ := os.ReadFile(in); !bytes.Equal(now, orig) {
		t.Fatal("the input changed")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("dir holds %v, want model, link, hard, sub", names)
	}
	// A failed write (a missing directory) leaves nothing either.
	if _, err := SliceFile(in, filepath.Join(dir, "none", "x.gguf"), 0, 2); err == nil {
		t.Fatal("slice into a missing directory succeeded")
	}
}
