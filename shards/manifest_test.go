package shards

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func buildManifest(t testing.TB, tm testModel) (string, *Manifest, []byte, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "full.gguf")
	tm.write(t, p)
	m, b, root, err := BuildManifest(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, m, b, root.String()
}

func TestManifestVerifiesEverySlice(t *testing.T) {
	for _, tm := range []testModel{{"qwen3", 4, 64, true, false}, {"llama", 3, 64, false, true}} {
		full, m, b, root := buildManifest(t, tm)
		if m.Layers != tm.layers || m.Hidden != tm.hidden || len(m.Tensors) == 0 {
			t.Fatalf("manifest shape %+v", m)
		}
		fc, _ := FileCID(full)
		if m.File != fc.String() {
			t.Fatalf("manifest file CID %s, want %s", m.File, fc)
		}
		if c, err := ParseModelCID(root); err != nil || !IsRoot(c) {
			t.Fatalf("root %s: %v", root, err)
		}
		back, err := DecodeManifest(b, ManifestCID(b))
		if err != nil || !bytes.Equal(back.Encode(), b) {
			t.Fatalf("round trip: %v", err)
		}
		if err := m.VerifySlice(full, root, 0, tm.layers); err != nil {
			t.Fatalf("the full model does not verify: %v", err)
		}
		dir := t.TempDir()
		for a := 0; a < tm.layers; a++ {
			for z := a + 1; z <= tm.layers; z++ {
				out := filepath.Join(dir, "s.gguf")
				if _, err := slice(full, out, a, z, func(*GGUF, ModelInfo) (string, []byte, error) { return root, nil, nil }); err != nil {
					t.Fatal(err)
				}
				if err := m.VerifySlice(out, root, a, z); err != nil {
					t.Fatalf("%s slice [%d,%d): %v", tm.arch, a, z, err)
				}
				if a > 0 || z < tm.layers {
					// A slice is not any other range.
					if err := m.VerifySlice(out, root, 0, tm.layers); !errors.Is(err, ErrMismatch) {
						t.Fatalf("slice [%d,%d) verified as the whole model: %v", a, z, err)
					}
				}
			}
		}
		hdr := filepath.Join(dir, "h.gguf")
		f, _ := os.Create(hdr)
		if err := writeHeader(full, f, root); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := m.VerifyHeader(hdr, root); err != nil {
			t.Fatalf("header: %v", err)
		}
	}
}

// poison rewrites the GGUF at path through edit.
func poison(t *testing.T, in, out string, edit func(g *GGUF, data [][]byte)) {
	t.Helper()
	g, err := ReadGGUFFile(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(in)
	data := make([][]byte, len(g.Tensors))
	for i, ti := range g.Tensors {
		data[i] = bytes.Clone(raw[g.DataOffset+int64(ti.Offset) : g.DataOffset+int64(ti.Offset+ti.Size)])
	}
	edit(g, data)
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, g, func(i int, w io.Writer) error { _, err := w.Write(data[i]); return err }); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(out, buf.Bytes(), 0o644)
}

func TestManifestRefusesPoison(t *testing.T) {
	tm := testModel{"qwen3", 4, 64, true, false}
	full, m, _, root := buildManifest(t, tm)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	if _, err := slice(full, good, 0, 2, func(*GGUF, ModelInfo) (string, []byte, error) { return root, nil, nil }); err != nil {
		t.Fatal(err)
	}
	idx := func(g *GGUF, name string) int {
		for i, ti := range g.Tensors {
			if ti.Name == name {
				return i
			}
		}
		t.Fatalf("no tensor %s", name)
		return -1
	}
	cases := []struct {
		name, want string
		edit       func(g *GGUF, data [][]byte)
	}{
		{"weights", "blk.1.attn_q.weight", func(g *GGUF, d [][]byte) { d[idx(g, "blk.1.attn_q.weight")][7] ^= 1 }},
		{"tokenizer", "metadata", func(g *GGUF, d [][]byte) {
			for i, kv := range g.KVs {
				if kv.Key == "tokenizer.ggml.tokens" {
					g.KVs[i].Value = []string{"a", "b", "EVIL", "<|x|>"}
				}
			}
		}},
		{"placeholder", "placeholder", func(g *GGUF, d [][]byte) { d[idx(g, "output.weight")][0] = 1 }},
		{"missing", "tensors", func(g *GGUF, d [][]byte) {
			i := idx(g, "blk.0.ffn_down.weight")
			g.Tensors = append(g.Tensors[:i], g.Tensors[i+1:]...)
			copy(d[i:], d[i+1:])
		}},
		{"shape", "blk.0.attn_norm.weight", func(g *GGUF, d [][]byte) {
			i := idx(g, "blk.0.attn_norm.weight")
			g.Tensors[i].Dims = []uint64{32, 2}
		}},
		{"source", "comes from", func(g *GGUF, d [][]byte) {
			for i, kv := range g.KVs {
				if kv.Key == SourceCIDKey {
					g.KVs[i].Value = "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(dir, c.name+".gguf")
			poison(t, good, bad, c.edit)
			err := m.VerifySlice(bad, root, 0, 2)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("poisoned %s: %v (want ErrMismatch naming %q)", c.name, err, c.want)
			}
		})
	}
}

func TestDecodeManifestRefuses(t *testing.T) {
	_, m, b, _ := buildManifest(t, testModel{"qwen3", 2, 64, true, false})
	root := ManifestCID(b)
	other := bytes.Replace(b, []byte(`"version":1`), []byte(`"version":1 `), 1)
	cases := map[string][]byte{
		"another root":  append(bytes.Clone(b[:len(b)-1]), []byte(`,"x":1}`)...),
		"trailing data": append(bytes.Clone(b), ' '),
		"not canonical": other,
	}
	for name, in := range cases {
		if _, err := DecodeManifest(in, root); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Well-formed for its own root, but wrong inside.
	for name, edit := range map[string]func(*Manifest){
		"size":       func(m *Manifest) { m.Tensors[0].Size++ },
		"dup":        func(m *Manifest) { m.Tensors[1].Name = m.Tensors[0].Name },
		"hash":       func(m *Manifest) { m.Tensors[0].SHA256 = "XYZ" },
		"layers":     func(m *Manifest) { m.Layers = 0 },
		"beyond":     func(m *Manifest) { m.Layers = 1 },
		"file":       func(m *Manifest) { m.File = "not-a-cid" },
		"version":    func(m *Manifest) { m.Version = 2 },
		"no tensors": func(m *Manifest) { m.Tensors = nil },
	} {
		mm := *m
		mm.Tensors = append([]ManifestTensor(nil), m.Tensors...)
		edit(&mm)
		eb := mm.Encode()
		if _, err := DecodeManifest(eb, ManifestCID(eb)); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParseModelCID(m.File); err != nil {
		t.Errorf("a file CID is a model name too: %v", err)
	}
	if _, err := ParseModelCID("bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"); err == nil {
		t.Error("a dag-cbor CID taken as a model")
	}
}

func FuzzDecodeManifest(f *testing.F) {
	_, _, b, _ := buildManifest(f, testModel{"qwen3", 2, 64, true, false})
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := ParseManifest(in)
		if err != nil {
			return
		}
		if !bytes.Equal(m.Encode(), in) {
			t.Fatal("decoded a manifest that does not re-encode to its bytes")
		}
		if _, err := DecodeManifest(in, ManifestCID(in)); err != nil {
			t.Fatalf("parsed but does not decode under its own root: %v", err)
		}
		m.expected(0, m.Layers)
	})
}

// Every slice carries its model's manifest, so a peer that was given only
// slices can still serve the manifest their layers are checked against;
// the manifest is believed only when it hashes to the slice's root.
func TestSliceCarriesManifest(t *testing.T) {
	full, _, b, root := buildManifest(t, testModel{"qwen3", 4, 64, true, false})
	dir := t.TempDir()
	out := filepath.Join(dir, "s.gguf")
	if _, err := SliceFile(full, out, 1, 3); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUFFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if g.String(ManifestKey) != string(b) || g.String(SourceCIDKey) != root {
		t.Fatal("the slice does not carry its model's root and manifest")
	}
	st := openStore(t, filepath.Join(dir, "store"))
	if got, err := st.AdoptManifest(out); err != nil || got != root {
		t.Fatalf("adopt: %q %v", got, err)
	}
	m, _, ok := st.Manifest(root)
	if !ok {
		t.Fatal("adopted manifest not stored")
	}
	if err := m.VerifySlice(out, root, 1, 3); err != nil {
		t.Fatal(err)
	}
	// The store's own cut of the same range is the same file.
	st2 := openStore(t, filepath.Join(dir, "store2"))
	me, err := st2.AddModel(full)
	if err != nil {
		t.Fatal(err)
	}
	se, err := st2.EnsureSlice(me.CID, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := FileCID(out); a.String() != se.CID {
		t.Fatalf("SliceFile and the store cut different files: %s vs %s", a, se.CID)
	}
	// A manifest of another model under this root is refused.
	_, _, ob, _ := buildManifest(t, testModel{"qwen3", 4, 64, false, false})
	bad := filepath.Join(dir, "bad.gguf")
	poison(t, out, bad, func(g *GGUF, d [][]byte) {
		for i, kv := range g.KVs {
			if kv.Key == ManifestKey {
				g.KVs[i].Value = string(ob)
			}
		}
	})
	st3 := openStore(t, filepath.Join(dir, "store3"))
	if _, err := st3.AdoptManifest(bad); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("a manifest that is not the root's adopted: %v", err)
	}
}

// A model whose name is not UTF-8 (or is very long) still gets a manifest
// its own store accepts.
func TestManifestOddNames(t *testing.T) {
	for _, name := range []string{"bad\xffname", strings.Repeat("n", 300)} {
		tm := testModel{"qwen3", 2, 64, true, false}
		g := tm.gguf()
		for i, kv := range g.KVs {
			if kv.Key == "general.name" {
				g.KVs[i].Value = name
			}
		}
		p := filepath.Join(t.TempDir(), "m.gguf")
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, g, func(i int, w io.Writer) error {
			_, err := w.Write(make([]byte, g.Tensors[i].Size))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(p, buf.Bytes(), 0o644)
		_, b, root, err := BuildManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeManifest(b, root); err != nil {
			t.Fatalf("name %q: its own manifest does not decode: %v", name[:10], err)
		}
	}
}
