package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/shards/hubtest"
)

// TestPullThenServe: the newcomer's path with real binaries. swarmctl
// pulls a GGUF from a hub (a local one serving synthetic models as
// Hugging Face does, reached through HF_ENDPOINT) over a connection that
// drops mid-file, shows progress, and prints how to serve it; the pulled
// file then serves a role that answers. A second pull downloads nothing;
// a gated repo wants HF_TOKEN, which swarmctl passes on.
func TestPullThenServe(t *testing.T) {
	data, err := os.ReadFile(synthModel(t, "qwen3", "tiny", "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t)
	hub.Add("test/Tiny-GGUF", "tiny-Q8_0.gguf", data, false)
	hub.Add("test/Gated-GGUF", "tiny-Q8_0.gguf", data, true)
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	d := startDaemon(t, "", "--no-mdns", "--threads", "1")

	hub.CutAfter(int64(len(data) / 3))
	out, errb, code := runCtlWithin(2*time.Minute, "", "--api", d.api, "pull", "hf.co/test/Tiny-GGUF:Q8_0")
	if code != 0 || !strings.Contains(out, "pulled hf.co/test/Tiny-GGUF:Q8_0") || !strings.Contains(out, "swarmctl role add") {
		t.Fatalf("pull: exit %d\n%s%s\n%s", code, out, errb, tail(d.log.String(), 30))
	}
	if !strings.Contains(errb, "pull running: download") || !strings.Contains(errb, "100%") {
		t.Fatalf("pull progress on a pipe, want plain lines to 100%%:\n%s", errb)
	}
	if r := hub.Ranges(); len(r) != 2 || !strings.HasPrefix(r[1], "bytes=") {
		t.Fatalf("the dropped download was not resumed with Range: %q", r)
	}
	var path string
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "file"); ok {
			path = strings.Fields(f)[0]
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != string(data) {
		t.Fatalf("pulled file %q: %v", path, err)
	}
	if out, errb, code := d.ctl("role", "add", "reasoner", path); code != 0 {
		t.Fatalf("role add of the pulled file: exit %d\n%s%s", code, out, errb)
	}
	eventually(t, 10*time.Second, "an answer from the pulled model", func() bool {
		_, _, code := d.ctl("ask", "--mode", "speed", "--max-tokens", "3", "hello")
		return code == 0
	})

	if out, _, code := d.ctl("pull", "hf.co/test/Tiny-GGUF/tiny-Q8_0.gguf"); code != 0 || !strings.Contains(out, "already here") {
		t.Fatalf("second pull: exit %d\n%s", code, out)
	}
	if _, errb, code := d.ctl("pull", "hf.co/test/Gated-GGUF:Q8_0"); code != 1 || !strings.Contains(errb, "HF_TOKEN") {
		t.Fatalf("gated pull without a token: exit %d\n%s", code, errb)
	}
	t.Setenv("HF_TOKEN", hub.Token)
	if out, errb, code := d.ctl("pull", "hf.co/test/Gated-GGUF:Q8_0"); code != 0 {
		t.Fatalf("gated pull with HF_TOKEN: exit %d\n%s%s", code, out, errb)
	}
	if _, errb, code := d.ctl("pull"); code != 2 || !strings.Contains(errb, "want one model") {
		t.Fatalf("pull without a model: exit %d\n%s", code, errb)
	}
}
