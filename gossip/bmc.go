package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/llmswarm/llmswarm/bmc"
)

// BMCDomain is the signing domain of BMC table envelopes.
const BMCDomain = "swarm-bmc"

// bmcCodec is the envelope payload type of BMC table records.
var bmcCodec = []byte("/swarm/v1/bmc")

// Limits on a BMC table record, on top of MaxRecordBytes.
const (
	// maxBMCRaw bounds the raw dump: 66 lines of at most 62 characters
	// plus LF is 4158 bytes (PROTOCOL.md).
	maxBMCRaw = 4200
	// BMCMaxSkew bounds how far a record's time_ms may be from the
	// receiver's clock. Older (or future) records are ignored: it limits
	// replays of captured messages to receivers that lost their state
	// (a restart), at the price of needing bridge clocks within 30 s.
	BMCMaxSkew = 30 * time.Second
)

// BMCTable is one BMC bridge's view of its board: the raw dump the board
// MACed, which the bridge verified with the board's key before publishing it
// inside a libp2p signed envelope with its own identity key. Receivers do not
// hold the board key: they trust the envelope signature and their list of
// allowed BMC peers, and re-parse Raw with bmc.ParseTable.
type BMCTable struct {
	PeerID   string `json:"peer_id"`   // the bridge; must be the envelope signer
	Seq      uint64 `json:"seq"`       // publish sequence, strictly increasing per bridge
	TimeMS   int64  `json:"time_ms"`   // bridge clock at publication (unix ms)
	Boot     uint32 `json:"boot"`      // board boot id (must match Raw)
	TableSeq uint32 `json:"table_seq"` // board table sequence (must match Raw)
	UptimeMS int64  `json:"uptime_ms"` // board uptime at the dump (must match Raw)
	Nonce    string `json:"nonce"`     // the TAB nonce the board's MAC covers
	Raw      string `json:"raw"`       // the dump as the board sent it, LF-terminated lines
	// Nodes translates the board's node handles back to peer IDs, for the
	// nodes the bridge knows (every key is HandleFor of its peer ID).
	Nodes map[string]string `json:"nodes,omitempty"`
	// Models translates model handles back to model CIDs.
	Models map[string]string `json:"models,omitempty"`

	table *bmc.Table // Raw parsed, set by Validate
}

func init() { record.RegisterType(&BMCTable{}) }

// Domain implements record.Record.
func (t *BMCTable) Domain() string { return BMCDomain }

// Codec implements record.Record.
func (t *BMCTable) Codec() []byte { return bmcCodec }

// MarshalRecord implements record.Record.
func (t *BMCTable) MarshalRecord() ([]byte, error) { return json.Marshal(t) }

// UnmarshalRecord implements record.Record. It decodes strictly and then
// checks every field against the record limits.
func (t *BMCTable) UnmarshalRecord(b []byte) error { return unmarshalStrict(b, t) }

// Table returns the parsed dump. It is set on every record that passed
// Validate (OpenBMCTable and the topic validator validate).
func (t *BMCTable) Table() *bmc.Table { return t.table }

// Validate checks every field against the record limits, parses Raw and
// checks that the header fields and the handle maps agree with it.
func (t *BMCTable) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: bmc table: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if _, err := peer.Decode(t.PeerID); err != nil {
		return bad("peer_id %q: %v", trunc(t.PeerID), err)
	}
	if t.Seq == 0 {
		return bad("seq is 0")
	}
	if _, err := bmc.EncodeTab(t.Nonce); err != nil {
		return bad("nonce %q: %v", trunc(t.Nonce), err)
	}
	if len(t.Raw) == 0 || len(t.Raw) > maxBMCRaw {
		return bad("raw dump of %d bytes (max %d)", len(t.Raw), maxBMCRaw)
	}
	for i := 0; i < len(t.Raw); i++ {
		if c := t.Raw[i]; c != '\n' && (c < 0x20 || c > 0x7e) {
			return bad("raw dump byte %d is %#x", i, c)
		}
	}
	tab, err := bmc.ParseTable([]byte(t.Raw))
	if err != nil {
		return bad("raw dump: %v", err)
	}
	if tab.Boot != t.Boot || tab.Seq != t.TableSeq || tab.Uptime.Milliseconds() != t.UptimeMS {
		return bad("header (boot %d, seq %d, uptime %d ms) does not match the dump (%d, %d, %d ms)",
			t.Boot, t.TableSeq, t.UptimeMS, tab.Boot, tab.Seq, tab.Uptime.Milliseconds())
	}
	onBoard := map[bmc.Handle]bool{}
	models := map[bmc.Handle]bool{}
	for _, n := range tab.Nodes {
		onBoard[n.Handle] = true
	}
	for _, p := range tab.Parts {
		onBoard[p.Node] = true
		models[p.Model] = true
	}
	if len(t.Nodes) > bmc.MaxNodes+bmc.MaxParts {
		return bad("%d node names", len(t.Nodes))
	}
	for hs, id := range t.Nodes {
		h, err := bmc.ParseHandle(hs)
		if err != nil {
			return bad("node handle %q: %v", trunc(hs), err)
		}
		pid, err := peer.Decode(id)
		if err != nil {
			return bad("node %s peer id %q: %v", hs, trunc(id), err)
		}
		if bmc.HandleFor([]byte(pid)) != h {
			return bad("node %s is not the handle of %s", hs, pid)
		}
		if !onBoard[h] {
			return bad("node %s is not in the dump", hs)
		}
	}
	if len(t.Models) > bmc.MaxParts {
		return bad("%d model names", len(t.Models))
	}
	for hs, cid := range t.Models {
		h, err := bmc.ParseHandle(hs)
		if err != nil {
			return bad("model handle %q: %v", trunc(hs), err)
		}
		if cid == "" || len(cid) > maxString {
			return bad("model %s: name empty or longer than %d bytes", hs, maxString)
		}
		if !models[h] {
			return bad("model %s is not in the dump", hs)
		}
	}
	tab.Nonce = t.Nonce
	t.table = tab
	return nil
}

// NewBMCTable builds the record for a table the bridge has verified
// (bmc.Bridge.Table). nodes and models may be nil; entries the dump does not
// mention are left out.
func NewBMCTable(bridge peer.ID, seq uint64, now time.Time, tab *bmc.Table,
	nodes map[bmc.Handle]peer.ID, models map[bmc.Handle]string) *BMCTable {
	r := &BMCTable{
		PeerID: bridge.String(), Seq: seq, TimeMS: now.UnixMilli(),
		Boot: tab.Boot, TableSeq: tab.Seq, UptimeMS: tab.Uptime.Milliseconds(),
		Nonce: tab.Nonce, Raw: string(tab.Raw),
	}
	seen := map[bmc.Handle]bool{}
	for _, n := range tab.Nodes {
		seen[n.Handle] = true
	}
	for _, p := range tab.Parts {
		seen[p.Node] = true
		if cid, ok := models[p.Model]; ok && cid != "" && len(cid) <= maxString {
			if r.Models == nil {
				r.Models = map[string]string{}
			}
			r.Models[p.Model.String()] = cid
		}
	}
	for h := range seen {
		if id, ok := nodes[h]; ok && bmc.HandleFor([]byte(id)) == h {
			if r.Nodes == nil {
				r.Nodes = map[string]string{}
			}
			r.Nodes[h.String()] = id.String()
		}
	}
	return r
}

// SealBMCTable signs t with key (which must be t.PeerID's key) into the
// bytes of a libp2p signed envelope.
func SealBMCTable(t *BMCTable, key crypto.PrivKey) ([]byte, error) {
	return seal(t, key, "bmc table")
}

// OpenBMCTable verifies a sealed BMC table and returns it with the peer that
// signed it. It checks size, signature, field limits, the dump's structure,
// and that the signer is the bridge the record names. It does not check
// freshness, ordering, nor whether the signer is an allowed BMC.
func OpenBMCTable(b []byte) (*BMCTable, peer.ID, error) {
	return open[*BMCTable](b, BMCDomain, "bmc table")
}

// bmcTopic joins the BMC topic on first use.
func (r *Router) bmcTopic() (*pubsub.Topic, error) { return r.Join(BMCTopic) }

// PublishBMCTable seals t with the router's key and publishes it on the BMC
// topic.
func (r *Router) PublishBMCTable(ctx context.Context, t *BMCTable) error {
	b, err := SealBMCTable(t, r.key)
	if err != nil {
		return err
	}
	topic, err := r.bmcTopic()
	if err != nil {
		return err
	}
	return topic.Publish(ctx, b)
}

// SubscribeBMCTables returns a subscription yielding every valid BMC table
// record not older than the last one from its bridge, including this peer's
// own. Whether a bridge is an allowed BMC is for the receiver to decide.
func (r *Router) SubscribeBMCTables() (*BMCSubscription, error) {
	topic, err := r.bmcTopic()
	if err != nil {
		return nil, err
	}
	s, err := topic.Subscribe(pubsub.WithBufferSize(64))
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	return &BMCSubscription{sub: s}, nil
}

// BMCSubscription yields validated BMC table records. A record's PeerID is
// the bridge that published and signed it (the validator checked both).
type BMCSubscription = Subscription[BMCTable]

// validateBMCTable is the BMC topic's validator: it rejects (and so
// penalises the sender through peer scoring) oversize, malformed, unsigned
// and mis-signed records and records republished by another peer than the
// bridge; it ignores stale ones (a publish seq not above the last one from
// that bridge, or a time_ms beyond BMCMaxSkew of this peer's clock).
func (r *Router) validateBMCTable(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	check := func(m *pubsub.Message) (*BMCTable, peer.ID, error) { return checkBMCTable(m, time.Now()) }
	return validator(r.log, r.bmcSeqs, "bmc table", check)(ctx, from, m)
}

// checkBMCTable opens a BMC message, checks it was published by the bridge
// that signed it, and that its time is within BMCMaxSkew of now.
func checkBMCTable(m *pubsub.Message, now time.Time) (*BMCTable, peer.ID, error) {
	t, signer, err := OpenBMCTable(m.GetData())
	if err != nil {
		return nil, "", err
	}
	if err := checkAuthor(m, signer, "bmc table"); err != nil {
		return nil, "", err
	}
	if skew := now.Sub(time.UnixMilli(t.TimeMS)); skew > BMCMaxSkew || skew < -BMCMaxSkew {
		return nil, "", fmt.Errorf("%w: bmc table of %s is %s off this peer's clock", ErrStale, signer, skew.Round(time.Millisecond))
	}
	return t, signer, nil
}
