package shards_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/shards/hubtest"
)

func TestParseModelRef(t *testing.T) {
	ok := map[string]shards.HubRef{
		"hf.co/Qwen/Qwen3-0.6B-GGUF":                      {Repo: "Qwen/Qwen3-0.6B-GGUF"},
		"hf.co/unsloth/Qwen3-4B-GGUF:q4_k_m":              {Repo: "unsloth/Qwen3-4B-GGUF", Quant: "q4_k_m"},
		"https://huggingface.co/a/b/sub/m-Q8_0.gguf":      {Repo: "a/b", File: "sub/m-Q8_0.gguf"},
		"huggingface.co/a/b@v1.0:Q8_0":                    {Repo: "a/b", Quant: "Q8_0", Revision: "v1.0"},
		"qwen3:0.6b-q4_k_m":                               {Repo: "unsloth/Qwen3-0.6B-GGUF", Quant: "Q4_K_M"},
		"gemma3:1b-q8_0":                                  {Repo: "unsloth/gemma-3-1b-it-GGUF", Quant: "Q8_0"},
		"gemma3:12b-q4_k_m":                               {Repo: "unsloth/gemma-3-12b-it-GGUF", Quant: "Q4_K_M"},
		"qwen3:30b-a3b-q4_k_m":                            {Repo: "unsloth/Qwen3-30B-A3B-GGUF", Quant: "Q4_K_M"},
		"gpt-oss:20b-f16":                                 {Repo: "unsloth/gpt-oss-20b-GGUF", Quant: "F16"},
		"lfm2:8b-a1b-q4_k_m":                              {Repo: "LiquidAI/LFM2-8B-A1B-GGUF", Quant: "Q4_K_M"},
		"gemma3n:e2b-q8_0":                                {Repo: "unsloth/gemma-3n-E2B-it-GGUF", Quant: "Q8_0"},
		"nemotron-3-nano:30b-q4_k_m":                      {Repo: "unsloth/Nemotron-3-Nano-30B-A3B-GGUF", Quant: "Q4_K_M"},
		"mistral-small3.2:24b-q4_k_m":                     {Repo: "unsloth/Mistral-Small-3.2-24B-Instruct-2506-GGUF", Quant: "Q4_K_M"},
		"hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_0": {Repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", Quant: "Q4_0"},
	}
	for in, want := range ok {
		got, short, err := shards.ParseModelRef(in)
		if err != nil || got != want || short {
			t.Errorf("ParseModelRef(%q) = %+v, %v, %v; want %+v", in, got, short, err, want)
		}
	}
	for name, repo := range map[string]string{"Qwen3:0.6B": "unsloth/Qwen3-0.6B-GGUF", "gemma3:4b": "unsloth/gemma-3-4b-it-GGUF",
		"LFM2:1.2B": "LiquidAI/LFM2-1.2B-GGUF", "gemma3n:E4B": "unsloth/gemma-3n-E4B-it-GGUF",
		"nemotron-nano:9b": "bartowski/nvidia_NVIDIA-Nemotron-Nano-9B-v2-GGUF"} {
		if got, short, err := shards.ParseModelRef(name); err != nil || !short || got.Repo != repo {
			t.Errorf("short name %s: %+v %v %v", name, got, short, err)
		}
	}
	bad := map[string]string{
		"qwen9:1b":                   "not a short name",
		"example.com/a/b":            "want hf.co/",
		"hf.co/a":                    "want hf.co/OWNER/REPO",
		"hf.co/a/../b":               "not a repo name",
		"hf.co/a/b/c.bin":            "want a .gguf path",
		"hf.co/a/b/../../etc/x.gguf": "want a .gguf path",
		"hf.co/a/b:Q4 K":             "quant",
		"hf.co/a/b/f.gguf:Q8_0":      "quant",
		"hf.co/a/b@bad rev":          "revision",
		"":                           "not a short name",
	}
	for in, want := range bad {
		if _, _, err := shards.ParseModelRef(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseModelRef(%q) = %v, want an error mentioning %q", in, err, want)
		}
	}
}

func TestPickFile(t *testing.T) {
	files := []shards.HubFile{
		{Path: "README.md", Size: 10}, {Path: "m-Q4_K_M.gguf", Size: 400}, {Path: "m-Q8_0.gguf", Size: 800},
		{Path: "m-UD-Q4_K_XL.gguf", Size: 450}, {Path: "big/m-Q6_K-00001-of-00002.gguf", Size: 10},
		{Path: "m-BF16.gguf", Size: 1600},
	}
	r := shards.HubRef{Repo: "o/m"}
	for quant, want := range map[string]string{"q8_0": "m-Q8_0.gguf", "Q4_K_M": "m-Q4_K_M.gguf", "bf16": "m-BF16.gguf"} {
		r.Quant = quant
		if f, err := shards.PickFile(files, r); err != nil || f.Path != want {
			t.Errorf("quant %s: %v %v, want %s", quant, f.Path, err, want)
		}
	}
	r.Quant = "Q6_K" // only split parts have it
	if _, err := shards.PickFile(files, r); err == nil || !strings.Contains(err.Error(), "quants: Q4_K_M, Q8_0, Q4_K_XL, BF16") {
		t.Errorf("missing quant: %v", err)
	}
	r.Quant = ""
	if _, err := shards.PickFile(files, r); err == nil || !strings.Contains(err.Error(), "name one with :QUANT") {
		t.Errorf("no quant among several: %v", err)
	}
	for free, want := range map[int64]string{0: "m-Q8_0.gguf", 1000: "m-Q8_0.gguf", 900: "m-Q4_K_M.gguf"} {
		if f, err := shards.PickFitting(files, r, free); err != nil || f.Path != want {
			t.Errorf("free %d: %s %v, want %s", free, f.Path, err, want)
		}
	}
	if _, err := shards.PickFitting(files, r, 300); err == nil || !strings.Contains(err.Error(), "Q4_K_M needs about 460 bytes") {
		t.Errorf("nothing fits: %v", err)
	}
}

// TestHubDownload: a pull as the hub serves it (tree API, redirect to a
// CDN on another host, Range), through the faults of the field: a cut
// connection resumed with Range, a CDN that ignores Range, corrupted
// bytes, gated repos, missing files.
func TestHubDownload(t *testing.T) {
	hub := hubtest.New(t)
	hub.PageSize(2)
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	hub.Add("o/open", "README.md", []byte("hi"), false)
	hub.Add("o/open", "m-Q8_0.gguf", data, false)
	hub.Add("o/open", "../../evil-Q8_0.gguf", data, false) // a hostile hub's listing: never listed, never stored
	hub.Add("o/gated", "m-Q4_K_M.gguf", data[:1000], true)
	ctx := context.Background()
	h := &shards.Hub{Endpoint: hub.URL, Attempts: 3}
	ref := shards.HubRef{Repo: "o/open", Quant: "Q8_0"}
	files, err := h.Files(ctx, ref)
	if err != nil || len(files) != 2 {
		t.Fatalf("files over 2 pages: %+v %v", files, err)
	}
	f, err := shards.PickFile(files, ref)
	if err != nil || f.SHA256 != hubtest.SHA256(data) || f.Size != int64(len(data)) {
		t.Fatalf("picked %+v %v", f, err)
	}
	dir := t.TempDir()
	get := func(name string) (string, []int64, error) {
		dst := filepath.Join(dir, name)
		var seen []int64
		err := h.Download(ctx, ref, f, dst, func(done, total int64) { seen = append(seen, done) })
		return dst, seen, err
	}

	dst, seen, err := get("whole.gguf")
	if err != nil || len(seen) == 0 || seen[len(seen)-1] != int64(len(data)) {
		t.Fatalf("download: %v, progress %v", err, seen)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
		t.Fatal("downloaded bytes differ")
	}

	hub.Ranges()
	hub.CutAfter(300 << 10) // the connection drops after 300 KiB
	if _, _, err = get("resumed.gguf"); err != nil {
		t.Fatalf("resumed download: %v", err)
	}
	if r := hub.Ranges(); len(r) != 2 || r[0] != "" || r[1] != "bytes=307200-" {
		t.Fatalf("ranges asked: %q, want none then bytes=307200-", r)
	}

	// Interrupted across calls: a cancelled pull keeps its partial file and
	// the next one resumes it.
	h.Attempts = 1
	hub.CutAfter(100 << 10)
	if _, _, err = get("later.gguf"); err == nil {
		t.Fatal("a cut with one attempt succeeded")
	}
	if st, err := os.Stat(filepath.Join(dir, "later.gguf.partial")); err != nil || st.Size() != 100<<10 {
		t.Fatalf("partial after a cut: %v %v", st, err)
	}
	if _, _, err = get("later.gguf"); err != nil {
		t.Fatalf("second pull: %v", err)
	}
	if r := hub.Ranges(); len(r) != 2 || r[1] != "bytes=102400-" {
		t.Fatalf("ranges over the two pulls: %q, want the second from byte 102400", r)
	}
	h.Attempts = 3

	// A CDN that hangs mid-file: the stall timeout ends the attempt and
	// the next resumes.
	h.Stall = 300 * time.Millisecond
	hub.HangAfter(200 << 10)
	if _, _, err = get("hung.gguf"); err != nil {
		t.Fatalf("after a hung CDN: %v", err)
	}
	if r := hub.Ranges(); len(r) != 2 || r[1] != "bytes=204800-" {
		t.Fatalf("ranges after a hang: %q", r)
	}
	h.Stall = 0

	hub.IgnoreRange(true)
	hub.CutAfter(200 << 10)
	if dst, _, err = get("norange.gguf"); err != nil {
		t.Fatalf("CDN without Range: %v", err)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
		t.Fatal("a 200 to a Range request was appended, not restarted")
	}
	hub.IgnoreRange(false)

	hub.Corrupt(true)
	if _, _, err = get("bad.gguf"); !errors.Is(err, shards.ErrHubHash) || !strings.Contains(err.Error(), f.SHA256) {
		t.Fatalf("corrupted download: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.gguf.partial")); !os.IsNotExist(err) {
		t.Fatal("a corrupted partial file was kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.gguf")); !os.IsNotExist(err) {
		t.Fatal("a corrupted file was kept")
	}
	hub.Corrupt(false)

	missing := f
	missing.Path = "nope.gguf"
	if err := h.Download(ctx, ref, missing, filepath.Join(dir, "x"), nil); !errors.Is(err, shards.ErrHubNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := h.Files(ctx, shards.HubRef{Repo: "o/nothing"}); !errors.Is(err, shards.ErrHubAuth) || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("missing repo without a token: %v", err)
	}

	gated := shards.HubRef{Repo: "o/gated", Quant: "Q4_K_M"}
	if _, err := h.Files(ctx, gated); !errors.Is(err, shards.ErrHubAuth) || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("gated without a token: %v", err)
	}
	h.Token = "wrong"
	if _, err := h.Files(ctx, gated); !errors.Is(err, shards.ErrHubAuth) || !strings.Contains(err.Error(), "may not read this repo") {
		t.Fatalf("gated with a wrong token: %v", err)
	}
	h.Token = hub.Token
	gf, err := h.Files(ctx, gated)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := shards.PickFile(gf, gated)
	if err := h.Download(ctx, gated, g, filepath.Join(dir, "gated.gguf"), nil); err != nil {
		t.Fatalf("gated with the token: %v", err)
	}
	if n := hub.CDNAuth(); n != 0 {
		t.Fatalf("the token was sent to the CDN %d times", n)
	}
}

func TestSafeRepoPath(t *testing.T) {
	for p, want := range map[string]bool{
		"m-Q8_0.gguf": true, "sub/dir/m.gguf": true,
		"": false, "/etc/x.gguf": false, "../x.gguf": false, "a/../../x.gguf": false, "a/./x.gguf": false,
		"a//x.gguf": false, "a\\x.gguf": false, "a\x00.gguf": false,
	} {
		if got := shards.SafeRepoPath(p); got != want {
			t.Errorf("SafeRepoPath(%q) = %v, want %v", p, got, want)
		}
	}
}
