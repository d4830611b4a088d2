package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfigZeroValueAndRoundTrip(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	if _, err := (Config{}).withDefaults(); err != nil {
		t.Fatalf("zero Config is not valid: %v", err)
	}
	c := Config{
		DataDir: "/d", Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: "127.0.0.1:1", Bootstrap: []string{},
		NoMDNS: true, Heartbeat: Duration(3 * time.Second), DeadAfterMisses: 4,
		Roles: map[string]string{"reasoner": "/m.gguf"}, Shards: []string{"/m.gguf:0-4"},
		Engine: EngineConfig{Threads: 1, Slots: 2, Context: 512}, MoA: MoAConfig{SimpleTimeout: Duration(time.Second)},
		BMCPeers: []string{"x"},
		Pipeline: PipelineConfig{SpotCheck: 0.25, SpotTolerance: 1e-4, PeerSessions: 3, PeerQueue: -1},
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, b, 0o600)
	got, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	c.Bootstrap = nil // omitempty
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if !strings.Contains(string(b), `"heartbeat":"3s"`) {
		t.Fatalf("durations are not written as strings: %s", b)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, json, want string
	}{
		{"unknown key", `{"bootstarp": []}`, "bootstarp"},
		{"bad duration", `{"heartbeat": "soon"}`, "soon"},
		{"number for a duration", `{"heartbeat": 2}`, `duration 2: want a string with a unit, such as "2s"`},
		{"nested number for a duration", `{"moa": {"simple_timeout": 6000000000}}`, "duration 6000000000: want a string"},
		{"float for a duration", `{"moa": {"speed_timeout": 1.5}}`, "duration 1.5: want a string"},
		{"trailing data", `{} {}`, "trailing"},
		{"not json", `listen: x`, "invalid character"},
	}
	for _, tc := range cases {
		p := filepath.Join(dir, tc.name+".json")
		os.WriteFile(p, []byte(tc.json), 0o600)
		if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	invalid := []struct {
		name string
		c    Config
		want string
	}{
		{"unknown role", Config{DataDir: dir, Roles: map[string]string{"poet": "/m"}}, "poet"},
		{"role without file", Config{DataDir: dir, Roles: map[string]string{"critic": ""}}, "critic"},
		{"bad shard", Config{DataDir: dir, Shards: []string{"/m.gguf:4-2"}}, "4-2"},
		{"shard without range", Config{DataDir: dir, Shards: []string{"m.gguf"}}, "m.gguf"},
		{"negative threads", Config{DataDir: dir, Engine: EngineConfig{Threads: -1}}, "engine"},
		{"gpu layers below -1", Config{DataDir: dir, Engine: EngineConfig{GPULayers: new(-2)}}, "engine.gpu_layers -2"},
		{"gpu libs elsewhere", Config{DataDir: dir, Engine: EngineConfig{GPULibs: "/opt/gpu"}}, "lib/ollama"},
		{"negative gpu memory", Config{DataDir: dir, Engine: EngineConfig{GPUMemory: -1}}, "engine.gpu_memory"},
		{"huge timeout", Config{DataDir: dir, MoA: MoAConfig{SpeedTimeout: Duration(time.Hour)}}, "speed_timeout"},
		{"heartbeat too fast", Config{DataDir: dir, Heartbeat: Duration(time.Millisecond)}, "heartbeat"},
		{"long device name", Config{DataDir: dir, Device: strings.Repeat("d", 129)}, "device"},
		{"too many shards", Config{DataDir: dir, Shards: make([]string, 65)}, "shards"},
		{"spot-check probability", Config{DataDir: dir, Pipeline: PipelineConfig{SpotCheck: 1.5}}, "spot_check"},
		{"spot-check probation", Config{DataDir: dir, Pipeline: PipelineConfig{SpotProbation: -2}}, "spot_probation"},
		{"negative spot-check tolerance", Config{DataDir: dir, Pipeline: PipelineConfig{SpotTolerance: -1}}, "spot_tolerance"},
		{"spot-audit share", Config{DataDir: dir, Pipeline: PipelineConfig{SpotAudit: -0.5}}, "spot_audit"},
		{"missing draft model", Config{DataDir: dir, Pipeline: PipelineConfig{Draft: dir + "/none.gguf"}}, "pipeline.draft"},
		{"draft model a directory", Config{DataDir: dir, Pipeline: PipelineConfig{Draft: dir}}, "pipeline.draft"},
		{"draft_min above draft_max", Config{DataDir: dir, Pipeline: PipelineConfig{DraftMin: 5, DraftMax: 3}}, "pipeline.draft_min"},
		{"draft_max too long", Config{DataDir: dir, Pipeline: PipelineConfig{DraftMax: 33}}, "pipeline.draft_max"},
		{"moa draft_min negative", Config{DataDir: dir, MoA: MoAConfig{DraftMin: -1}}, "moa.draft_min"},
		{"draft_min above the default draft_max", Config{DataDir: dir, MoA: MoAConfig{DraftMin: 9}}, "moa.draft_min"},
		{"moa unverified unknown", Config{DataDir: dir, MoA: MoAConfig{Unverified: "sometimes"}}, "moa.unverified"},
		{"negative peer sessions", Config{DataDir: dir, Pipeline: PipelineConfig{PeerSessions: -1}}, "peer_sessions"},
		{"peer queue", Config{DataDir: dir, Pipeline: PipelineConfig{PeerQueue: -2}}, "peer_queue"},
	}
	for _, tc := range invalid {
		if _, err := tc.c.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestParseShardSpec(t *testing.T) {
	cases := []struct {
		in   string
		want ShardSpec
		ok   bool
	}{
		{"/models/q.gguf:0-14", ShardSpec{Path: "/models/q.gguf", Start: 0, End: 14}, true},
		{"q.GGUF:3-4", ShardSpec{Path: "q.GGUF", Start: 3, End: 4}, true},
		{"bafkreiabc:14-28", ShardSpec{CID: "bafkreiabc", Start: 14, End: 28}, true},
		{"bafkreiabc:14", ShardSpec{}, false},
		{":0-1", ShardSpec{}, false},
		{"x:1-1", ShardSpec{}, false},
		{"x:-1-2", ShardSpec{}, false},
	}
	for _, tc := range cases {
		got, err := ParseShardSpec(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseShardSpec(%q) = %+v, %v", tc.in, got, err)
		}
	}
}
