package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

// Limits on a capability record. A record outside them is rejected whole.
const (
	MaxRecordBytes = 64 << 10
	maxAddrs       = 32
	maxAddrLen     = 256
	maxRoles       = 16
	maxShards      = 64
	maxString      = 128
	maxLayers      = 4096
	maxGPUs        = 8
)

// CapabilityDomain is the signing domain of capability envelopes.
const CapabilityDomain = "swarm-capability"

// capabilityCodec is the envelope payload type of capability records.
var capabilityCodec = []byte("/swarm/v1/caps")

// Thermal states, as iOS and Android name them. "" means unknown.
const (
	ThermalNominal  = "nominal"
	ThermalFair     = "fair"
	ThermalSerious  = "serious"
	ThermalCritical = "critical"
)

// Capability is what one peer tells the swarm about itself every heartbeat.
// It travels as the payload of a libp2p signed envelope; the envelope's key
// must be PeerID's key.
type Capability struct {
	PeerID   string   `json:"peer_id"`
	Seq      uint64   `json:"seq"`
	TimeMS   int64    `json:"time_ms"` // sender's clock; informational only
	Version  string   `json:"version,omitempty"`
	Addrs    []string `json:"addrs,omitempty"`
	Platform Platform `json:"platform"`
	Roles    []Role   `json:"roles,omitempty"`
	Shards   []Shard  `json:"shards,omitempty"`
	Load     Load     `json:"load"`
	Thermal  string   `json:"thermal,omitempty"`
	Battery  *Battery `json:"battery,omitempty"`
}

// Platform describes the device.
type Platform struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Device   string `json:"device,omitempty"` // e.g. "raspberry-pi-4", "pixel-7"
	Cores    int    `json:"cores"`
	RAMBytes uint64 `json:"ram_bytes"`
	FreeRAM  uint64 `json:"free_ram_bytes,omitempty"`
	// GPUs are the GPUs the peer's loaded backends found (none: it
	// computes on its CPU).
	GPUs []GPU `json:"gpus,omitempty"`
}

// Equal reports whether p and q say the same.
func (p Platform) Equal(q Platform) bool {
	return p.OS == q.OS && p.Arch == q.Arch && p.Device == q.Device && p.Cores == q.Cores &&
		p.RAMBytes == q.RAMBytes && p.FreeRAM == q.FreeRAM && slices.Equal(p.GPUs, q.GPUs)
}

// GPU is a GPU a peer computes on.
type GPU struct {
	Backend   string `json:"backend"` // ggml's backend: "Vulkan", "CUDA"
	Name      string `json:"name"`    // the device, as its driver names it
	VRAMBytes uint64 `json:"vram_bytes"`
	FreeVRAM  uint64 `json:"free_vram_bytes,omitempty"`
}

// Role is a whole model serving one Mixture-of-Agents role.
type Role struct {
	Role      string  `json:"role"`
	ModelCID  string  `json:"model_cid"`
	ModelName string  `json:"model_name,omitempty"`
	Quant     string  `json:"quant,omitempty"`
	TokPerSec float64 `json:"tok_s,omitempty"`   // measured decode speed
	Context   int     `json:"context,omitempty"` // tokens one request may hold (prompt and answer)
	// Vocab is the model's tokenizer fingerprint (engine
	// Tokenizer.Fingerprint): role models with the same one can draft for
	// each other (speculative speed mode). A claim, checked again by the
	// verifier when the drafter answers.
	Vocab string `json:"vocab,omitempty"`
	// Backend is where the peer runs the model's layers (Shard.Backend).
	Backend string `json:"backend,omitempty"`
}

// Shard is layers [Start,End) of one model.
type Shard struct {
	ModelCID   string  `json:"model_cid"`
	ModelName  string  `json:"model_name,omitempty"`
	Quant      string  `json:"quant,omitempty"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Layers     int     `json:"layers"` // the model's total layer count
	Hidden     int     `json:"hidden,omitempty"`
	MemBytes   int64   `json:"mem_bytes,omitempty"`
	MsPerLayer float64 `json:"ms_per_layer,omitempty"` // measured decode cost of one layer
	// Backend is where the peer runs the shard's layers: "CPU", or a GPU
	// backend with its share of them ("Vulkan 8/8+head"; engine.Offload).
	Backend string `json:"backend,omitempty"`
}

// Load is how busy the peer is.
type Load struct {
	Active   int `json:"active"`           // requests being served now
	Capacity int `json:"capacity"`         // concurrent requests it accepts
	Queued   int `json:"queued,omitempty"` // requests waiting for a slot
}

// Battery is reported where the platform exposes it.
type Battery struct {
	Percent  int  `json:"percent"`
	Charging bool `json:"charging"`
}

func init() { record.RegisterType(&Capability{}) }

// TakesWork reports whether the peer accepts new requests. A peer that
// serves roles or shards announces a capacity of 0 while it refuses new
// work (its battery is low, or it runs hot); its thermal and battery
// fields say why.
func (c *Capability) TakesWork() bool {
	return c.Load.Capacity > 0 || (len(c.Roles) == 0 && len(c.Shards) == 0)
}

// PowerFactor scales a peer's weight by its power source: 1 on mains or a
// charger (or when it reports no battery); on battery, 0.4 + 0.5 x the
// charge, so 0.9 full and 0.5 at a fifth, and a peer on power wins over
// an equally fast one draining its battery.
func (c *Capability) PowerFactor() float64 {
	b := c.Battery
	if b == nil || b.Charging {
		return 1
	}
	return 0.4 + 0.5*float64(min(max(b.Percent, 0), 100))/100
}

// Domain implements record.Record.
func (c *Capability) Domain() string { return CapabilityDomain }

// Codec implements record.Record.
func (c *Capability) Codec() []byte { return capabilityCodec }

// MarshalRecord implements record.Record.
func (c *Capability) MarshalRecord() ([]byte, error) { return json.Marshal(c) }

// UnmarshalRecord implements record.Record. It decodes strictly and then
// checks every field against the record limits.
func (c *Capability) UnmarshalRecord(b []byte) error { return unmarshalStrict(b, c) }

// Validate checks every field against the record limits.
func (c *Capability) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if _, err := peer.Decode(c.PeerID); err != nil {
		return bad("peer_id %q: %v", trunc(c.PeerID), err)
	}
	if c.Seq == 0 {
		return bad("seq is 0")
	}
	if len(c.Addrs) > maxAddrs {
		return bad("%d addrs (max %d)", len(c.Addrs), maxAddrs)
	}
	for _, a := range c.Addrs {
		if len(a) == 0 || len(a) > maxAddrLen {
			return bad("addr of %d bytes", len(a))
		}
	}
	for name, s := range map[string]string{"version": c.Version, "platform.os": c.Platform.OS,
		"platform.arch": c.Platform.Arch, "platform.device": c.Platform.Device} {
		if len(s) > maxString {
			return bad("%s longer than %d bytes", name, maxString)
		}
	}
	if c.Platform.Cores < 0 || c.Platform.Cores > 4096 {
		return bad("platform.cores %d", c.Platform.Cores)
	}
	if len(c.Platform.GPUs) > maxGPUs {
		return bad("%d gpus (max %d)", len(c.Platform.GPUs), maxGPUs)
	}
	for i, g := range c.Platform.GPUs {
		if len(g.Backend) > maxString || len(g.Name) > maxString {
			return bad("platform.gpus[%d]: a name longer than %d bytes", i, maxString)
		}
	}
	if len(c.Roles) > maxRoles {
		return bad("%d roles (max %d)", len(c.Roles), maxRoles)
	}
	for i, r := range c.Roles {
		if !isName(r.Role) {
			return bad("roles[%d].role %q is not a lowercase name", i, trunc(r.Role))
		}
		if err := checkModel(r.ModelCID, r.ModelName, r.Quant); err != nil {
			return bad("roles[%d]: %v", i, err)
		}
		if !finite(r.TokPerSec) || r.TokPerSec < 0 {
			return bad("roles[%d].tok_s %v", i, r.TokPerSec)
		}
		if r.Context < 0 || r.Context > 1<<24 {
			return bad("roles[%d].context %d", i, r.Context)
		}
		if len(r.Vocab) > 64 || !isHex(r.Vocab) {
			return bad("roles[%d].vocab %q is not a fingerprint", i, trunc(r.Vocab))
		}
		if len(r.Backend) > maxString {
			return bad("roles[%d].backend longer than %d bytes", i, maxString)
		}
	}
	if len(c.Shards) > maxShards {
		return bad("%d shards (max %d)", len(c.Shards), maxShards)
	}
	for i, s := range c.Shards {
		if err := checkModel(s.ModelCID, s.ModelName, s.Quant); err != nil {
			return bad("shards[%d]: %v", i, err)
		}
		if s.Layers <= 0 || s.Layers > maxLayers || s.Start < 0 || s.Start >= s.End || s.End > s.Layers {
			return bad("shards[%d]: layers [%d,%d) of %d", i, s.Start, s.End, s.Layers)
		}
		if s.Hidden < 0 || s.MemBytes < 0 || !finite(s.MsPerLayer) || s.MsPerLayer < 0 {
			return bad("shards[%d]: negative or non-finite size or speed", i)
		}
		if len(s.Backend) > maxString {
			return bad("shards[%d].backend longer than %d bytes", i, maxString)
		}
	}
	if c.Load.Active < 0 || c.Load.Capacity < 0 || c.Load.Queued < 0 || c.Load.Queued > 1<<20 {
		return bad("negative load")
	}
	switch c.Thermal {
	case "", ThermalNominal, ThermalFair, ThermalSerious, ThermalCritical:
	default:
		return bad("thermal %q", trunc(c.Thermal))
	}
	if b := c.Battery; b != nil && (b.Percent < 0 || b.Percent > 100) {
		return bad("battery percent %d", b.Percent)
	}
	return nil
}

func checkModel(cid, name, quant string) error {
	if cid == "" || len(cid) > maxString {
		return errors.New("model_cid empty or too long")
	}
	if len(name) > maxString || len(quant) > 32 {
		return errors.New("model_name or quant too long")
	}
	return nil
}

// isHex reports whether s is lowercase hex digits only (fingerprints; ""
// too: none announced).
func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isName reports whether s is a short lowercase identifier (role names).
func isName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
