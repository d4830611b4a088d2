package shards

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// testModel describes a small fake model file written with WriteGGUF.
type testModel struct {
	arch   string
	layers int
	hidden int
	tied   bool
	extra  bool // a global rope_freqs tensor
}

func (tm testModel) gguf() *GGUF {
	a := tm.arch
	g := &GGUF{Alignment: 32, KVs: []KV{
		{Key: "general.architecture", Type: TypeString, Value: a},
		{Key: "general.name", Type: TypeString, Value: "test-" + a},
		{Key: "general.alignment", Type: TypeUint32, Value: uint32(32)},
		{Key: "general.file_type", Type: TypeUint32, Value: uint32(7)},
		{Key: a + ".block_count", Type: TypeUint32, Value: uint32(tm.layers)},
		{Key: a + ".embedding_length", Type: TypeUint32, Value: uint32(tm.hidden)},
		{Key: a + ".context_length", Type: TypeUint32, Value: uint32(2048)},
		{Key: a + ".attention.head_count", Type: TypeUint32, Value: uint32(4)},
		{Key: a + ".attention.head_count_kv", Type: TypeUint32, Value: uint32(2)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Type: TypeFloat32, Value: float32(1e-6)},
		{Key: "tokenizer.ggml.tokens", Type: TypeArray, ArrayType: TypeString, Value: []string{"a", "b", "c", "<|x|>"}},
		{Key: "tokenizer.ggml.token_type", Type: TypeArray, ArrayType: TypeInt32, Value: []int32{1, 1, 1, 3}},
		{Key: "tokenizer.ggml.add_bos_token", Type: TypeBool, Value: false},
		{Key: "misc.u64s", Type: TypeArray, ArrayType: TypeUint64, Value: []uint64{1, 1 << 40}},
		{Key: "misc.f64", Type: TypeFloat64, Value: 2.5},
	}}
	h := uint64(tm.hidden)
	add := func(name string, typ GGMLType, dims ...uint64) {
		g.Tensors = append(g.Tensors, TensorInfo{Name: name, Type: typ, Dims: dims})
	}
	add("token_embd.weight", GGMLQ8_0, h, 4)
	add("output_norm.weight", GGMLF32, h)
	if !tm.tied {
		add("output.weight", GGMLQ8_0, h, 4)
	}
	if tm.extra {
		add("rope_freqs.weight", GGMLF32, 8)
	}
	for l := range tm.layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", GGMLF32, h)
		add(p+"attn_q.weight", GGMLQ8_0, h, h)
		add(p+"ffn_down.weight", GGMLQ4_K, 256, h)
	}
	return g
}

// write writes the model; tensor data is filled with a byte derived from the
// tensor index so copies can be checked.
func (tm testModel) write(t testing.TB, path string) *GGUF {
	t.Helper()
	g := tm.gguf()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = WriteGGUF(f, g, func(i int, w io.Writer) error {
		_, err := w.Write(bytes.Repeat([]byte{byte(i + 1)}, int(g.Tensors[i].Size)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestReadGGUFRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	tm := testModel{arch: "qwen3", layers: 4, hidden: 64, tied: true}
	want := tm.write(t, p)
	g, err := ReadGGUFFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.Version != 3 || len(g.KVs) != len(want.KVs) || len(g.Tensors) != len(want.Tensors) {
		t.Fatalf("header: version %d, %d kvs, %d tensors", g.Version, len(g.KVs), len(g.Tensors))
	}
	for i, kv := range g.KVs {
		if fmt.Sprint(kv) != fmt.Sprint(want.KVs[i]) {
			t.Errorf("kv %d: %v, want %v", i, kv, want.KVs[i])
		}
	}
	for i, ti := range g.Tensors {
		if fmt.Sprint(ti) != fmt.Sprint(want.Tensors[i]) {
			t.Errorf("tensor %d: %v, want %v", i, ti, want.Tensors[i])
		}
	}
	mi := g.ModelInfo()
	exp := ModelInfo{Arch: "qwen3", Name: "test-qwen3", Layers: 4, Hidden: 64, Quant: "Q8_0", ContextLength: 2048,
		VocabSize: 4, HeadCount: 4, HeadCountKV: 2, LayerRange: [2]int{0, 4}, HasEmbedding: true, HasHead: true}
	var total int64
	for _, t := range g.Tensors {
		total += int64(t.Size)
	}
	exp.TensorBytes = total
	exp.LayerBytes = 64*4 + 64*64/32*34 + 256*64/256*144
	if mi != exp {
		t.Fatalf("ModelInfo\n got %+v\nwant %+v", mi, exp)
	}
}

func TestTensorBytes(t *testing.T) {
	cases := []struct {
		typ  GGMLType
		dims []uint64
		want uint64
		bad  bool
	}{
		{GGMLF32, []uint64{10, 3}, 120, false},
		{GGMLF16, []uint64{10}, 20, false},
		{GGMLBF16, []uint64{4, 4}, 32, false},
		{GGMLQ8_0, []uint64{64, 2}, 136, false},
		{GGMLQ4_K, []uint64{256, 3}, 432, false},
		{GGMLQ6_K, []uint64{512}, 420, false},
		{GGMLType(2), []uint64{32}, 18, false},   // Q4_0
		{GGMLType(10), []uint64{256}, 84, false}, // Q2_K
		{GGMLType(15), []uint64{256}, 292, false},
		{GGMLQ4_K, []uint64{64}, 0, true},
		{GGMLType(99), []uint64{1}, 0, true},
		{GGMLF32, []uint64{1 << 40, 1 << 40}, 0, true},
	}
	for _, c := range cases {
		got, err := tensorBytes(c.typ, c.dims)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%v %v: %d %v, want %d bad=%v", c.typ, c.dims, got, err, c.want, c.bad)
		}
	}
}

func TestReadModelInfoErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	testModel{arch: "llama", layers: 2, hidden: 32}.write(t, good)
	data, _ := os.ReadFile(good)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	v9 := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(v9[4:], 9)
	cases := []struct {
		name, path string
		want       error
	}{
		{"missing", filepath.Join(dir, "none.gguf"), os.ErrNotExist},
		{"not gguf", write("txt", []byte("hello world, not a model")), ErrNotGGUF},
		{"empty", write("empty", nil), ErrNotGGUF},
		{"truncated header", write("th", data[:40]), ErrTruncated},
		{"truncated data", write("td", data[:len(data)-10]), ErrTruncated},
		{"version", write("v9", v9), ErrUnsupportedVersion},
	}
	for _, c := range cases {
		_, err := ReadModelInfo(c.path)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if !bytes.Contains([]byte(err.Error()), []byte(c.path)) {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
}

func TestReadGGUFHostileCounts(t *testing.T) {
	le := binary.LittleEndian
	hdr := func(nt, nkv uint64) []byte {
		b := []byte("GGUF")
		b = le.AppendUint32(b, 3)
		b = le.AppendUint64(b, nt)
		return le.AppendUint64(b, nkv)
	}
	str := func(b []byte, s string) []byte { return append(le.AppendUint64(b, uint64(len(s))), s...) }
	cases := map[string][]byte{
		"huge tensor count": hdr(1<<60, 0),
		"huge kv count":     hdr(0, 1<<60),
		"huge string":       le.AppendUint64(hdr(0, 1), 1<<62),
		"huge array":        le.AppendUint64(le.AppendUint32(le.AppendUint32(str(hdr(0, 1), "k"), uint32(TypeArray)), uint32(TypeUint8)), 1<<62),
		"nested array":      le.AppendUint64(le.AppendUint32(le.AppendUint32(str(hdr(0, 1), "k"), uint32(TypeArray)), uint32(TypeArray)), 1),
		"bad value type":    le.AppendUint32(str(hdr(0, 1), "k"), 77),
		"too many dims":     le.AppendUint32(str(hdr(1, 0), "t"), 9),
	}
	for name, b := range cases {
		if _, err := ReadGGUF(bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzReadGGUF(f *testing.F) {
	p := filepath.Join(f.TempDir(), "seed.gguf")
	testModel{arch: "qwen2", layers: 1, hidden: 32, tied: true}.write(f, p)
	seed, _ := os.ReadFile(p)
	f.Add(seed)
	f.Add(seed[:100])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ReadGGUF(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		_ = g.ModelInfo()
		for _, ti := range g.Tensors {
			if g.DataOffset+int64(ti.Offset+ti.Size) > int64(len(b)) {
				t.Fatalf("tensor %q beyond the data", ti.Name)
			}
		}
	})
}

// TestUints: integer arrays come back element by element (negatives as 0),
// a scalar as one element, anything else as nil.
func TestUints(t *testing.T) {
	g := &GGUF{KVs: []KV{
		{Key: "a.i32s", Type: TypeArray, ArrayType: TypeInt32, Value: []int32{0, 2, -1, 8}},
		{Key: "a.u64s", Type: TypeArray, ArrayType: TypeUint64, Value: []uint64{1, 1 << 40}},
		{Key: "a.u32", Type: TypeUint32, Value: uint32(7)},
		{Key: "a.zero", Type: TypeUint32, Value: uint32(0)},
		{Key: "a.f32", Type: TypeFloat32, Value: float32(2)},
		{Key: "a.strs", Type: TypeArray, ArrayType: TypeString, Value: []string{"x"}},
	}}
	for key, want := range map[string][]uint64{
		"a.i32s": {0, 2, 0, 8}, "a.u64s": {1, 1 << 40}, "a.u32": {7}, "a.zero": {0},
		"a.f32": nil, "a.strs": nil, "a.absent": nil,
	} {
		if got := g.Uints(key); fmt.Sprint(got) != fmt.Sprint(want) || (got == nil) != (want == nil) {
			t.Errorf("Uints(%s) = %v, want %v", key, got, want)
		}
	}
}

// TestModelInfoPerLayerKV: KV heads given per layer are counted as the
// most any layer has, with the layers that attend.
func TestModelInfoPerLayerKV(t *testing.T) {
	g := testModel{arch: "lfm2", layers: 4, hidden: 64, tied: true}.gguf()
	for i, kv := range g.KVs {
		if kv.Key == "lfm2.attention.head_count_kv" {
			g.KVs[i] = KV{Key: kv.Key, Type: TypeArray, ArrayType: TypeUint32, Value: []uint32{0, 0, 4, 0}}
		}
	}
	if mi := g.ModelInfo(); mi.HeadCountKV != 4 || mi.AttentionLayers != 1 || mi.HeadCount != 4 {
		t.Errorf("per-layer KV heads: head_count %d, head_count_kv %d, attention_layers %d; want 4, 4, 1", mi.HeadCount, mi.HeadCountKV, mi.AttentionLayers)
	}
}
