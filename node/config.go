package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/nat"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// DefaultPort is the libp2p port (TCP and QUIC) and DefaultAPI the local
// HTTP API address.
const (
	DefaultPort = 7434
	DefaultAPI  = "127.0.0.1:7433"
)

// Config configures one peer. Its zero value is valid: every empty field
// takes the default documented in docs/config.md. It round-trips as JSON; the
// swarmd config file and the mobile facade's JSON have this shape.
type Config struct {
	// DataDir holds the identity key, the optional swarm.key, models and
	// shards. Default: ~/.swarm.
	DataDir string `json:"data_dir,omitempty"`
	// Listen is the libp2p listen multiaddrs. Default: TCP on port 7434
	// on all IPv4 and IPv6 interfaces, and QUIC too in an open swarm.
	Listen []string `json:"listen,omitempty"`
	// API is the local HTTP API address. Default 127.0.0.1:7433; "off"
	// disables it. A non-loopback address needs APIToken.
	API string `json:"api,omitempty"`
	// APIToken, when set, is required as "Authorization: Bearer TOKEN" on
	// every API call except /healthz.
	APIToken string `json:"api_token,omitempty"`
	// Bootstrap peers to connect to at start (multiaddrs ending in /p2p/ID).
	Bootstrap []string `json:"bootstrap,omitempty"`
	// NoMDNS turns off LAN discovery by mDNS.
	NoMDNS bool `json:"no_mdns,omitempty"`
	// SwarmKey is the path of a pre-shared key file (IPFS swarm.key format)
	// that makes the swarm private. Default: DataDir/swarm.key, created
	// with a new random key on first start (a swarm of its own, which
	// others join by invitation).
	SwarmKey string `json:"swarm_key,omitempty"`
	// Open makes this peer a member of the open swarm: no key, and any
	// peer that finds it (mDNS on the LAN, a dial) sees its models and
	// routes prompts to it. Not with SwarmKey.
	Open bool `json:"open,omitempty"`
	// DHTMode is "server" (default), "client", "auto" or "off".
	DHTMode string `json:"dht_mode,omitempty"`
	// Heartbeat is the liveness tick: the peers this one uses (routes,
	// role peers, calls of the last two minutes) are probed every
	// heartbeat, and this peer's record goes out at most once per
	// heartbeat when it changes. Default 1s. (Before records went out
	// only on change, it was how often they were published.)
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// DeadAfterMisses is how many probes in a row a peer may fail before
	// it is marked dead. Default 2. (It counted missed heartbeats.)
	DeadAfterMisses int `json:"dead_after_misses,omitempty"`
	// RecordRefresh is how often this peer publishes its capability
	// record to the swarm when nothing in it changed. Default 0: never
	// (peers check each other's records on their probes; a refresh to
	// the whole swarm costs every peer in proportion to its size).
	RecordRefresh Duration `json:"record_refresh,omitempty"`
	// ProbeRate is how many liveness probes a second this peer sends to
	// the peers of its table it does not use, whatever the table's size.
	// Default 0.5.
	ProbeRate float64 `json:"probe_rate,omitempty"`
	// ConnLow and ConnHigh are the connection manager's watermarks.
	// Defaults 128 and 192: a table of 64 neighbours and the peers whose
	// tables hold this one stay under them (docs/scale.md).
	ConnLow  int `json:"conn_low,omitempty"`
	ConnHigh int `json:"conn_high,omitempty"`
	// MemoryLimitMB bounds the memory libp2p may use. Default 256.
	MemoryLimitMB int `json:"memory_limit_mb,omitempty"`
	// MaxMemory bounds what the roles and shards this peer serves may
	// take (weights and KV caches), e.g. "3GiB". Default: half the
	// device's RAM (none where the RAM is unknown).
	MaxMemory ByteSize `json:"max_memory,omitempty"`
	// Device names the hardware in capability records (e.g. "raspberry-pi-4").
	Device string `json:"device,omitempty"`
	// Roles maps a Mixture-of-Agents role to the GGUF file serving it.
	Roles map[string]string `json:"roles,omitempty"`
	// Shards are layer ranges this peer serves for pipeline inference:
	// "PATH.gguf:A-B" (a full model, sliced into the data dir, or a slice)
	// or "MODEL_CID:A-B" (fetched from a peer that holds it).
	Shards []string `json:"shards,omitempty"`
	// Engine tunes local inference.
	Engine EngineConfig `json:"engine,omitempty"`
	// MoA tunes the Mixture-of-Agents originator.
	MoA MoAConfig `json:"moa,omitempty"`
	// Progress sets how hung peers are noticed.
	Progress ProgressConfig `json:"progress,omitempty"`
	// Pipeline tunes the pipeline originator.
	Pipeline PipelineConfig `json:"pipeline,omitempty"`
	// Trust sets how other peers' claims are checked.
	Trust TrustConfig `json:"trust,omitempty"`
	// Ledger sets how this peer keeps account of what it gives and takes.
	Ledger LedgerConfig `json:"ledger,omitempty"`
	// BMCSerial makes this peer a BMC bridge: the serial device of the
	// board (e.g. /dev/ttyACM0). See docs/bmc.md.
	BMCSerial string `json:"bmc_serial,omitempty"`
	// BMCKey is the file holding the board's 32-byte HMAC key (64 hex
	// characters or 32 raw bytes), provisioned into a board that has none.
	// Default: DataDir/bmc.key, created with a random key if missing.
	BMCKey string `json:"bmc_key,omitempty"`
	// BMCDTR pulses DTR when the port opens, which resets a real Uno.
	BMCDTR bool `json:"bmc_dtr,omitempty"`
	// BMCPeers are the peer IDs of the BMC bridges whose tables this peer
	// accepts; the authority among them is the lowest live peer ID.
	BMCPeers []string `json:"bmc_peers,omitempty"`
	// Gossip tunes gossip peer scoring and gating (config_trust.go).
	Gossip GossipConfig `json:"gossip,omitempty"`
	// NAT is reachability, relays and hole punching (see nat.Config).
	NAT nat.Config `json:"nat,omitempty"`
	// PeerTable bounds the peer table (config_trust.go).
	PeerTable PeerTableConfig `json:"peer_table,omitempty"`
	// Power sets when the peer stops taking work (config_power.go).
	Power PowerConfig `json:"power,omitempty"`
	// Hub is where pulls fetch models from (config_hub.go).
	Hub HubConfig `json:"hub,omitempty"`
}

// EngineConfig tunes the inference engine.
type EngineConfig struct {
	// Threads is the CPU threads for inference. Default: all cores.
	Threads int `json:"threads,omitempty"`
	// Slots is the concurrent requests per loaded model. Default 4.
	Slots int `json:"slots,omitempty"`
	// Queue is how many requests may wait for a slot when all are busy.
	// Default 16; -1: none (busy at once).
	Queue int `json:"queue,omitempty"`
	// Context is the KV cache size of one request, in tokens. Default: the
	// model's context length, at most 4096.
	Context int `json:"context,omitempty"`
	// Isolate gives each session a KV cache of its own, allocated at its
	// first use, and runs its steps alone: no batching, less memory held
	// while few sessions run, and results bit-identical whatever else
	// runs. Default false: a model's sessions share one KV cache (all its
	// slots', allocated at the first session) and batch their steps.
	Isolate bool `json:"isolate,omitempty"`
	// GPULayers is how many layers of each role model and shard run on a
	// GPU, where a GPU backend found one (GPULibs): unset or -1, as many
	// as fit; 0, none (the CPU only); n, at most n. The last layers go
	// first, the output head with them when every layer fits.
	GPULayers *int `json:"gpu_layers,omitempty"`
	// GPUMemory bounds what this peer's models take of a GPU's memory
	// (weights and KV caches; max_memory counts the host's only).
	// Default: the device's free memory, less a reserve for compute.
	GPUMemory ByteSize `json:"gpu_memory,omitempty"`
	// GPULibs is the folder GPU backends (libggml-vulkan.so,
	// libggml-cuda.so) are loaded from; it must end in lib/ollama.
	// Default: lib/ollama beside the folder of the swarmd binary, where
	// make build-vulkan puts the Vulkan backend.
	GPULibs string `json:"gpu_libs,omitempty"`
}

// gpuLayers is engine.gpu_layers in the engine's terms.
func (e EngineConfig) gpuLayers() int {
	if e.GPULayers == nil || *e.GPULayers < 0 {
		return engine.GPULayersAll
	}
	return *e.GPULayers
}

// PipelineConfig tunes the pipeline originator.
type PipelineConfig struct {
	// Standby keeps a second route over other peers warm, fed every step,
	// so that a failover costs a step instead of a replay; it doubles the
	// compute a generation costs the swarm. Default false.
	Standby bool `json:"standby,omitempty"`
	// Draft is a GGUF model with the vocabulary of the models this peer
	// asks pipelines for, run here to draft their answers (speculative
	// decoding: the route verifies several tokens per round trip).
	// Greedy answers use it unless a query says otherwise. Default: none.
	Draft string `json:"draft,omitempty"`
	// DraftSwarm, without Draft, drafts with a drafter role of the swarm
	// (this peer's own, or the nearest live peer's) whose tokenizer is the
	// model's, over /swarm/draft/1.0.0. Default false.
	DraftSwarm bool `json:"draft_swarm,omitempty"`
	// DraftMin and DraftMax bound how many tokens the draft proposes a
	// round; in between, each round's length is chosen by measured cost
	// (acceptance, draft time, verify time), 0 being plain decoding where
	// drafting does not pay. Defaults 0 and 8; at most 32.
	DraftMin int `json:"draft_min,omitempty"`
	DraftMax int `json:"draft_max,omitempty"`
	// SpotCheck is the share of generations checked on a second route
	// over other peers (0: 0.1; -1: only those through a peer this one has
	// not proven yet); SpotTolerance is how far the two routes' logits may
	// differ, relative to the largest (0: 1e-3).
	SpotCheck     float64 `json:"spot_check,omitempty"`
	SpotTolerance float64 `json:"spot_tolerance,omitempty"`
	// RequireChecked refuses a pipeline route with layers nobody can
	// check (one remote peer alone holds them and this peer has no copy):
	// the query fails as unchecked_route instead of answering on that
	// peer's word. Default false: the answer names those layers.
	RequireChecked bool `json:"require_checked,omitempty"`
	// SpotAudit is the share of greedy speculative answers no second
	// route checked that are audited once complete: one accepted draft
	// token asked about again of the route's last hop alone (0: every
	// one; -1: none).
	SpotAudit float64 `json:"spot_audit,omitempty"`
	// SpotProbation is how many checked answers that agreed a proven peer
	// serves before its generations are only sampled at SpotCheck: until
	// then every generation through it is checked (0: 5; -1: none).
	SpotProbation int `json:"spot_probation,omitempty"`
	// PeerSessions and PeerQueue bound what one remote peer may hold on
	// each shard this peer serves: sessions (0: a quarter of engine.slots,
	// at least 2) and opens waiting for one of them (0: a quarter of
	// engine.queue, at least 1; -1: none). Beyond, an open is refused as
	// busy.
	PeerSessions int `json:"peer_sessions,omitempty"`
	PeerQueue    int `json:"peer_queue,omitempty"`
	// Batch lets this peer's stages batch the steps of sessions that
	// arrive together (one KV cache per shard): more tokens per second with
	// several sequences in flight, but a step's results then depend by
	// rounding on what runs beside it, so a replay after a failover or a
	// spot check's second route may differ in the last digits, and pick
	// another token where two logits are that close. Default false: each
	// stage session runs alone, bit-identical whatever else runs.
	Batch bool `json:"batch,omitempty"`
	// PrefillChunk is the size of the parts a prompt goes down a route of
	// two or more stages in, pipelined: each stage works on one part while
	// the next works on the part before, so the first token comes after
	// about one stage's prefill plus the route's fill, not the sum of all
	// stages'. 0: sized per route from the compute and transfer times
	// measured on its hops (128 positions until measured); N: N positions,
	// rounded up to a multiple of 128; -1: prompts go whole, a stage at a
	// time. The tokens are the same every way.
	PrefillChunk int `json:"prefill_chunk,omitempty"`
}

func (p PipelineConfig) validate() error {
	switch {
	case p.SpotCheck != -1 && (p.SpotCheck < 0 || p.SpotCheck > 1):
		return fmt.Errorf("config: pipeline.spot_check %g: want 0..1, or -1", p.SpotCheck)
	case p.SpotAudit != -1 && (p.SpotAudit < 0 || p.SpotAudit > 1):
		return fmt.Errorf("config: pipeline.spot_audit %g: want 0..1, or -1", p.SpotAudit)
	case p.SpotProbation < -1 || p.SpotProbation > 1000:
		return fmt.Errorf("config: pipeline.spot_probation %d: want -1 (none) .. 1000", p.SpotProbation)
	case p.SpotTolerance < 0 || p.SpotTolerance > 1:
		return fmt.Errorf("config: pipeline.spot_tolerance %g: want 0..1", p.SpotTolerance)
	case p.PeerSessions < 0 || p.PeerSessions > 64:
		return fmt.Errorf("config: pipeline.peer_sessions %d: want 0..64", p.PeerSessions)
	case p.PeerQueue < -1 || p.PeerQueue > 1024:
		return fmt.Errorf("config: pipeline.peer_queue %d: want -1 (none) .. 1024", p.PeerQueue)
	case p.PrefillChunk < -1 || p.PrefillChunk > pipeline.MaxPrefillChunk:
		return fmt.Errorf("config: pipeline.prefill_chunk %d: want -1 (prompts whole), 0 (sized per route) .. %d", p.PrefillChunk, pipeline.MaxPrefillChunk)
	}
	if err := checkDraftK("pipeline", p.DraftMin, p.DraftMax); err != nil {
		return err
	}
	if p.Draft != "" {
		fi, err := os.Stat(p.Draft)
		switch {
		case err != nil:
			return fmt.Errorf("config: pipeline.draft: %w", err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("config: pipeline.draft %q is not a file", p.Draft)
		}
	}
	return nil
}

// MoAConfig sets optional fixed caps on how long an originator waits for
// an answer. Zero (the default): none; each agent gets the time its device
// needs for the tokens asked, and hung peers are caught by Progress.
type MoAConfig struct {
	SimpleTimeout  Duration `json:"simple_timeout,omitempty"`  // SIMPLE_FACT queries
	ComplexTimeout Duration `json:"complex_timeout,omitempty"` // every other type
	SpeedTimeout   Duration `json:"speed_timeout,omitempty"`   // speed mode
	// DraftMin and DraftMax bound the draft length when this peer's
	// reasoner answers drafted by a drafter (speed mode), as
	// pipeline.draft_min and draft_max do for pipelines.
	DraftMin int `json:"draft_min,omitempty"`
	DraftMax int `json:"draft_max,omitempty"`
	// Unverified says whether a role whose holders this peer has not
	// verified (challenged) is asked of them: "never" (default: only
	// verified holders get a prompt) or "ask" (a few of them, their
	// answers marked unverified; never as spotter or aggregator).
	Unverified string `json:"unverified,omitempty"`
}

// checkDraftK checks a section's draft_min and draft_max.
func checkDraftK(section string, lo, hi int) error {
	switch {
	case lo < 0 || lo > engine.MaxSpecK:
		return fmt.Errorf("config: %s.draft_min %d: want 0..%d", section, lo, engine.MaxSpecK)
	case hi < 0 || hi > engine.MaxSpecK:
		return fmt.Errorf("config: %s.draft_max %d: want 0 (8) .. %d", section, hi, engine.MaxSpecK)
	case lo > max(hi, 8) || (hi > 0 && lo > hi):
		return fmt.Errorf("config: %s.draft_min %d is above draft_max (%d; 0 is 8)", section, lo, hi)
	}
	return nil
}

// Duration is a time.Duration that reads and writes JSON as "2s".
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler. It accepts only strings such
// as "2s" or "1m30s": a bare number is refused, since 2 would silently mean
// two nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string with a unit, such as \"2s\" or \"500ms\"", bytes.TrimSpace(b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// LoadConfig reads a JSON config file. Unknown keys are errors, so a typo
// does not silently fall back to a default.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Validate reports the first problem of the config, with defaults
// applied, naming the key; Start refuses such a config with the same error.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults fills every empty field.
func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return c, fmt.Errorf("config: no data_dir and no home directory: %w", err)
		}
		c.DataDir = filepath.Join(home, ".swarm")
	}
	if c.Open && c.SwarmKey != "" {
		return c, fmt.Errorf("config: open and swarm_key (%s) together: an open swarm has no key; drop one of them", c.SwarmKey)
	}
	if len(c.Listen) == 0 {
		p := strconv.Itoa(DefaultPort)
		c.Listen = []string{"/ip4/0.0.0.0/tcp/" + p, "/ip6/::/tcp/" + p}
		if c.Open {
			// QUIC takes no pre-shared key: an open swarm's only.
			c.Listen = []string{"/ip4/0.0.0.0/tcp/" + p, "/ip4/0.0.0.0/udp/" + p + "/quic-v1",
				"/ip6/::/tcp/" + p, "/ip6/::/udp/" + p + "/quic-v1"}
		}
	}
	if c.API == "" {
		c.API = DefaultAPI
	}
	if c.SwarmKey == "" && !c.Open {
		c.SwarmKey = filepath.Join(c.DataDir, SwarmKeyFile)
	}
	if c.DHTMode == "" {
		c.DHTMode = "server"
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = Duration(swarm.DefaultHeartbeat)
	}
	if c.DeadAfterMisses == 0 {
		c.DeadAfterMisses = swarm.DefaultMisses
	}
	if c.ProbeRate == 0 {
		c.ProbeRate = swarm.DefaultProbeRate
	}
	if c.ConnLow == 0 {
		c.ConnLow = 128
	}
	if c.ConnHigh == 0 {
		c.ConnHigh = 192
	}
	if c.MemoryLimitMB == 0 {
		c.MemoryLimitMB = 256
	}
	c.Power = c.Power.withDefaults()
	c.Hub = c.Hub.withDefaults()
	return c, c.validate()
}

// validate checks a config with defaults applied; every error names the key.
func (c Config) validate() error {
	for _, l := range c.Listen {
		if _, err := ma.NewMultiaddr(l); err != nil {
			return fmt.Errorf("config: listen address %q: %w", l, err)
		}
	}
	for _, b := range c.Bootstrap {
		if _, err := ParseBootstrap(b); err != nil {
			return err
		}
	}
	if c.API != "off" {
		host, port, err := net.SplitHostPort(c.API)
		if err != nil {
			return fmt.Errorf("config: api address %q: want HOST:PORT", c.API)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("config: api address %q: bad port", c.API)
		}
		if !isLoopback(host) && c.APIToken == "" {
			return fmt.Errorf("config: api address %q is not loopback: set api_token to expose the API", c.API)
		}
	}
	switch c.DHTMode {
	case "server", "client", "auto", "off":
	default:
		return fmt.Errorf("config: dht_mode %q: want server, client, auto or off", c.DHTMode)
	}
	if c.Heartbeat < Duration(100*time.Millisecond) || c.Heartbeat > Duration(time.Minute) {
		return fmt.Errorf("config: heartbeat %s: want between 100ms and 1m", time.Duration(c.Heartbeat))
	}
	if c.DeadAfterMisses < 1 || c.DeadAfterMisses > 100 {
		return fmt.Errorf("config: dead_after_misses %d: want 1..100", c.DeadAfterMisses)
	}
	if c.RecordRefresh != 0 && (c.RecordRefresh < Duration(10*time.Second) || c.RecordRefresh > Duration(24*time.Hour)) {
		return fmt.Errorf("config: record_refresh %s: want 0 (never) or between 10s and 24h", time.Duration(c.RecordRefresh))
	}
	if !(c.ProbeRate >= 0.01 && c.ProbeRate <= 100) {
		return fmt.Errorf("config: probe_rate %v: want between 0.01 and 100 probes a second", c.ProbeRate)
	}
	if c.ConnLow < 1 || c.ConnHigh < c.ConnLow {
		return fmt.Errorf("config: conn_low %d / conn_high %d: want 1 <= low <= high", c.ConnLow, c.ConnHigh)
	}
	if len(c.Device) > 128 {
		return fmt.Errorf("config: device name of %d bytes: at most 128", len(c.Device))
	}
	if len(c.Roles) > 16 || len(c.Shards) > 64 {
		return fmt.Errorf("config: %d roles and %d shards: at most 16 and 64 (a capability record carries no more)", len(c.Roles), len(c.Shards))
	}
	for role, path := range c.Roles {
		if !moa.IsRole(role) {
			return fmt.Errorf("config: roles: unknown role %q (roles: %s)", role, strings.Join(moa.Roles, ", "))
		}
		if path == "" {
			return fmt.Errorf("config: roles: %s has no model file", role)
		}
	}
	for _, sh := range c.Shards {
		if _, err := ParseShardSpec(sh); err != nil {
			return err
		}
	}
	if c.Engine.Threads < 0 || c.Engine.Slots < 0 || c.Engine.Context < 0 {
		return fmt.Errorf("config: engine: threads, slots and context must not be negative")
	}
	if c.Engine.Queue < -1 || c.Engine.Queue > 1024 {
		return fmt.Errorf("config: engine.queue %d: want -1 (none) .. 1024", c.Engine.Queue)
	}
	if c.Engine.Slots > 64 {
		return fmt.Errorf("config: engine.slots %d: at most 64", c.Engine.Slots)
	}
	if g := c.Engine.GPULayers; g != nil && (*g < -1 || *g > 4096) {
		return fmt.Errorf("config: engine.gpu_layers %d: want -1 (as many as fit, the default), 0 (none) .. 4096", *g)
	}
	if c.Engine.GPUMemory < 0 {
		return fmt.Errorf("config: engine.gpu_memory must not be negative")
	}
	if d := c.Engine.GPULibs; d != "" && !strings.HasSuffix(filepath.ToSlash(filepath.Clean(d)), "lib/ollama") {
		return fmt.Errorf("config: engine.gpu_libs %q: the folder must end in lib/ollama (ggml loads GPU backends from no other)", d)
	}
	for name, d := range map[string]Duration{"simple_timeout": c.MoA.SimpleTimeout,
		"complex_timeout": c.MoA.ComplexTimeout, "speed_timeout": c.MoA.SpeedTimeout} {
		if d < 0 || d > Duration(10*time.Minute) {
			return fmt.Errorf("config: moa.%s %s: want 0..10m", name, time.Duration(d))
		}
	}
	if err := checkDraftK("moa", c.MoA.DraftMin, c.MoA.DraftMax); err != nil {
		return err
	}
	switch moa.Unverified(c.MoA.Unverified) {
	case "", moa.UnverifiedNever, moa.UnverifiedAsk:
	default:
		return fmt.Errorf("config: moa.unverified %q: want never (default) or ask", c.MoA.Unverified)
	}
	if err := c.Progress.validate(); err != nil {
		return err
	}
	if err := c.Trust.validate(); err != nil {
		return err
	}
	if err := c.Ledger.validate(); err != nil {
		return err
	}
	if err := c.NAT.Validate(); err != nil {
		return err
	}
	if err := c.Gossip.validate(); err != nil {
		return err
	}
	if err := c.PeerTable.validate(); err != nil {
		return err
	}
	if err := c.Pipeline.validate(); err != nil {
		return err
	}
	if err := c.Hub.validate(); err != nil {
		return err
	}
	if err := c.Power.validate(); err != nil {
		return err
	}
	for _, p := range c.BMCPeers {
		if _, err := peer.Decode(p); err != nil {
			return fmt.Errorf("config: bmc_peers: %q is not a peer ID: %w", p, err)
		}
	}
	if c.BMCSerial == "" && (c.BMCKey != "" || c.BMCDTR) {
		return fmt.Errorf("config: bmc_key and bmc_dtr need bmc_serial (they configure the bridge's board)")
	}
	if c.MaxMemory < 0 || (c.MaxMemory > 0 && c.MaxMemory < 1<<20) {
		return fmt.Errorf("config: max_memory %s: want at least 1MiB", c.MaxMemory)
	}
	if c.MemoryLimitMB < 32 {
		return fmt.Errorf("config: memory_limit_mb %d: want at least 32", c.MemoryLimitMB)
	}
	return nil
}

// ParseBootstrap parses a bootstrap multiaddr, which must name the peer.
func ParseBootstrap(s string) (peer.AddrInfo, error) {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("config: bootstrap address %q: %w", s, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("config: bootstrap address %q must end in /p2p/PEER_ID: %w", s, err)
	}
	return *ai, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ShardSpec is one entry of Config.Shards.
type ShardSpec struct {
	Path  string // a GGUF file, or
	CID   string // a model CID to fetch from the swarm
	Start int
	End   int
}

// ParseShardSpec reads "PATH.gguf:A-B" or "CID:A-B" (layers [A,B)).
func ParseShardSpec(s string) (ShardSpec, error) {
	i := strings.LastIndex(s, ":")
	if i <= 0 {
		return ShardSpec{}, fmt.Errorf("config: shard %q: want PATH.gguf:A-B or MODEL_CID:A-B", s)
	}
	src, rng := s[:i], s[i+1:]
	as, bs, ok := strings.Cut(rng, "-")
	a, err1 := strconv.Atoi(as)
	b, err2 := strconv.Atoi(bs)
	if !ok || err1 != nil || err2 != nil || a < 0 || b <= a {
		return ShardSpec{}, fmt.Errorf("config: shard %q: layer range %q: want A-B with 0 <= A < B", s, rng)
	}
	spec := ShardSpec{Start: a, End: b}
	if strings.HasSuffix(strings.ToLower(src), ".gguf") || strings.ContainsRune(src, os.PathSeparator) {
		spec.Path = src
	} else {
		spec.CID = src
		// A CID in another multibase spelling (upper case, base58...)
		// names the same model: keep the canonical one, which stores,
		// records and announcements are keyed by.
		if c, err := cid.Decode(src); err == nil {
			spec.CID = c.String()
		}
	}
	return spec, nil
}
