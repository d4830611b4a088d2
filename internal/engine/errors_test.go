package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// TestBadModelFiles: each broken file gives an error that wraps the right
// sentinel and names the file.
func TestBadModelFiles(t *testing.T) {
	dir := t.TempDir()
	full := synthFile(t, "qwen2", "tiny", "f32")
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		path string
		want error
	}{
		{"missing", filepath.Join(dir, "nope.gguf"), os.ErrNotExist},
		{"not gguf", write("text.gguf", []byte("this is not a model, just text\n")), ErrNotGGUF},
		{"empty", write("empty.gguf", nil), ErrNotGGUF},
		{"truncated data", write("trunc.gguf", data[:len(data)*2/3]), ErrTruncated},
		{"truncated header", write("trunch.gguf", data[:200]), ErrTruncated},
		{"unsupported arch", withArch(t, full, filepath.Join(dir, "gpt2.gguf"), "gpt2"), ErrUnsupportedArch},
		// a BPE vocabulary labelled with an architecture that reads
		// SentencePiece (no scores): ollama's tokenizer panicked
		{"vocabulary of another kind", withArch(t, full, filepath.Join(dir, "gemma2.gguf"), "gemma2"), ErrNotGGUF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(context.Background(), c.path, Options{Threads: 1})
			if !errors.Is(err, c.want) {
				t.Fatalf("Load: %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.path) {
				t.Fatalf("error %q does not name the file", err)
			}
			if _, err := LoadTokenizer(c.path); !errors.Is(err, c.want) {
				t.Fatalf("LoadTokenizer: %v, want %v", err, c.want)
			}
			t.Log(err)
		})
	}

	t.Run("slice lacks layers", func(t *testing.T) {
		p := filepath.Join(dir, "mid.gguf")
		if _, err := shards.Slice(full, p, 1, 3); err != nil {
			t.Fatal(err)
		}
		m := loadT(t, p, Options{Slots: 1})
		if got := m.Info().LayerRange; got != [2]int{1, 3} || m.Info().HasEmbedding || m.Info().HasHead {
			t.Fatalf("slice info %+v", m.Info())
		}
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, r := range [][2]int{{0, 2}, {1, 4}, {2, 4}, {0, 4}} {
			var err error
			if r[0] == 0 {
				_, err = s.RunRange(context.Background(), r[0], r[1], []int32{1, 2}, nil)
			} else {
				_, err = s.RunRange(context.Background(), r[0], r[1], nil, make([]float32, 64))
			}
			if !errors.Is(err, ErrMissingLayers) || !strings.Contains(err.Error(), p) {
				t.Fatalf("range %v: %v", r, err)
			}
		}
		if _, err := m.Generate(context.Background(), Request{Prompt: "hi"}, nil); !errors.Is(err, ErrMissingLayers) {
			t.Fatalf("Generate on a slice: %v", err)
		}
		// bad inputs are errors too
		if _, err := s.RunRange(context.Background(), 1, 3, nil, make([]float32, 63)); !errors.Is(err, ErrBadInput) {
			t.Fatalf("ragged hidden: %v", err)
		}
		if _, err := s.RunRange(context.Background(), 3, 1, nil, make([]float32, 64)); !errors.Is(err, ErrBadRange) {
			t.Fatalf("reversed range: %v", err)
		}
		// the slice still tokenizes (the originator may hold only a slice)
		tok, err := LoadTokenizer(p)
		if err != nil {
			t.Fatal(err)
		}
		if ids, err := tok.Encode("hello", false); err != nil || len(ids) == 0 {
			t.Fatalf("slice tokenizer: %v %v", ids, err)
		}
	})
}

// withArch copies a GGUF, changing general.architecture (and the keys
// prefixed by it).
func withArch(t *testing.T, in, out, arch string) string {
	t.Helper()
	g, err := shards.ReadGGUFFile(in)
	if err != nil {
		t.Fatal(err)
	}
	old := g.String("general.architecture")
	for i := range g.KVs {
		kv := &g.KVs[i]
		if kv.Key == "general.architecture" {
			kv.Value = arch
		} else if rest, ok := strings.CutPrefix(kv.Key, old+"."); ok {
			kv.Key = arch + "." + rest
		}
	}
	src, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	offs := make([]int64, len(g.Tensors))
	for i, ti := range g.Tensors {
		offs[i] = g.DataOffset + int64(ti.Offset)
	}
	err = shards.WriteGGUF(f, g, func(i int, w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(src, offs[i], int64(g.Tensors[i].Size)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
