package bmc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// macDomain starts the MAC input, ahead of the nonce, so a table MAC can
// never be confused with any other use of the key.
const macDomain = "bmc/1 "

// Table is a dump of the board's tables. Bridge.Table and VerifyTable only
// return tables whose MAC checked out.
type Table struct {
	Boot   uint32        // EEPROM boot counter: changes on every board reset
	Seq    uint32        // +1 on every mutation (heartbeats, edits, deaths)
	Uptime time.Duration // board clock when dumped
	Period time.Duration // liveness rule in force: dead when silent for
	Misses int           // more than Period*Misses
	Nodes  []Node        // in board slot order
	Parts  []Partition   // in board slot order

	Nonce string   // the host nonce the MAC covers
	MAC   [32]byte // HMAC-SHA256, see PROTOCOL.md
	Raw   []byte   // the dump as received: LF-terminated lines, S line last
}

// Node returns the liveness entry of h, if the board knows it.
func (t *Table) Node(h Handle) (Node, bool) {
	for _, n := range t.Nodes {
		if n.Handle == h {
			return n, true
		}
	}
	return Node{}, false
}

// Live reports whether the board lists h as live. A node the board does not
// know is not live.
func (t *Table) Live(h Handle) bool {
	n, ok := t.Node(h)
	return ok && n.Live
}

// Dead reports whether the board has declared h dead (listed, not live).
func (t *Table) Dead(h Handle) bool {
	n, ok := t.Node(h)
	return ok && !n.Live
}

// PartsOf returns the partitions of a model, in board order.
func (t *Table) PartsOf(model Handle) []Partition {
	var out []Partition
	for _, p := range t.Parts {
		if p.Model == model {
			out = append(out, p)
		}
	}
	return out
}

// Newer reports whether t was dumped after o by the same board: a later
// boot, or the same boot and a higher (seq, uptime). Seq alone does not move
// when nothing changed; uptime does, within a boot.
func (t *Table) Newer(o *Table) bool {
	if t.Boot != o.Boot {
		return t.Boot > o.Boot
	}
	if t.Seq != o.Seq {
		return t.Seq > o.Seq
	}
	return t.Uptime > o.Uptime
}

// macInput is what the board MACs: the domain and nonce line, then every
// dump line before the S line, each LF-terminated.
func macInput(nonce string, body []byte) []byte {
	b := make([]byte, 0, len(macDomain)+len(nonce)+1+len(body))
	b = append(b, macDomain...)
	b = append(b, nonce...)
	b = append(b, '\n')
	return append(b, body...)
}

func computeMAC(key []byte, nonce string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(macInput(nonce, body))
	return m.Sum(nil)
}

// splitDump separates a raw dump into its body (lines before S, each
// LF-terminated) and the S line. CRLF line ends are accepted and normalised.
func splitDump(raw []byte) (body []byte, lines []string, err error) {
	s := strings.ReplaceAll(string(raw), "\r\n", "\n")
	if !strings.HasSuffix(s, "\n") {
		return nil, nil, fmt.Errorf("%w: table dump does not end with a newline", ErrMalformed)
	}
	lines = strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) < 2 {
		return nil, nil, fmt.Errorf("%w: table dump has %d lines", ErrMalformed, len(lines))
	}
	last := len(lines) - 1
	body = []byte(s[:len(s)-len(lines[last])-1])
	return body, lines, nil
}

// ParseTable parses a raw dump without checking its MAC: for peers that got
// the table inside an envelope signed by a trusted bridge and have no key.
func ParseTable(raw []byte) (*Table, error) {
	_, lines, err := splitDump(raw)
	if err != nil {
		return nil, err
	}
	t := &Table{Raw: bytes.Clone(raw)}
	seen := map[Handle]bool{}
	type pkey struct{ n, m Handle }
	seenP := map[pkey]bool{}
	for i, l := range lines {
		r, err := ParseLine(l)
		if err != nil {
			return nil, fmt.Errorf("table line %d: %w", i+1, err)
		}
		switch v := r.(type) {
		case Header:
			if i != 0 {
				return nil, malformed(l, "header not first")
			}
			t.Boot, t.Seq, t.Uptime, t.Period, t.Misses = v.Boot, v.Seq, v.Uptime, v.Period, v.Misses
		case Node:
			if i == 0 || len(t.Parts) > 0 || seen[v.Handle] || len(t.Nodes) >= MaxNodes {
				return nil, malformed(l, "node line out of place, repeated, or beyond %d", MaxNodes)
			}
			seen[v.Handle] = true
			t.Nodes = append(t.Nodes, v)
		case Partition:
			k := pkey{v.Node, v.Model}
			if i == 0 || seenP[k] || len(t.Parts) >= MaxParts {
				return nil, malformed(l, "partition line out of place, repeated, or beyond %d", MaxParts)
			}
			seenP[k] = true
			t.Parts = append(t.Parts, v)
		case Signature:
			if i != len(lines)-1 {
				return nil, malformed(l, "signature not last")
			}
			t.MAC = v.MAC
		default:
			return nil, malformed(l, "not a table line")
		}
		if i == len(lines)-1 {
			if _, ok := r.(Signature); !ok {
				return nil, malformed(l, "dump does not end with a signature")
			}
		}
	}
	return t, nil
}

// VerifyTable checks the MAC of a raw dump for key and the nonce the host
// sent, then parses it. A dump obtained with another nonce (a replay), with
// any byte changed, or signed with another key fails with ErrBadMAC.
func VerifyTable(key []byte, nonce string, raw []byte) (*Table, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: key is %d bytes, want %d", ErrMalformed, len(key), KeySize)
	}
	body, lines, err := splitDump(raw)
	if err != nil {
		return nil, err
	}
	sig, err := ParseLine(lines[len(lines)-1])
	if err != nil {
		return nil, fmt.Errorf("table signature: %w", err)
	}
	s, ok := sig.(Signature)
	if !ok {
		return nil, malformed(lines[len(lines)-1], "dump does not end with a signature")
	}
	if !hmac.Equal(s.MAC[:], computeMAC(key, nonce, body)) {
		return nil, ErrBadMAC
	}
	t, err := ParseTable(raw)
	if err != nil {
		return nil, err
	}
	t.Nonce = nonce
	return t, nil
}

// SignTable encodes t exactly as the firmware dumps it and appends the MAC
// for key and nonce: the host-side twin of the firmware's TAB, for tests and
// tools. t.Raw, t.MAC and t.Nonce are ignored.
func SignTable(key []byte, nonce string, t *Table) ([]byte, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: key is %d bytes, want %d", ErrMalformed, len(key), KeySize)
	}
	if !isToken(nonce, nonceMin, nonceMax) {
		return nil, fmt.Errorf("%w: nonce %q", ErrMalformed, nonce)
	}
	var body bytes.Buffer
	body.WriteString(Header{Boot: t.Boot, Seq: t.Seq, Uptime: t.Uptime, Config: Config{Period: t.Period, Misses: t.Misses}}.String())
	body.WriteByte('\n')
	for _, n := range t.Nodes {
		body.WriteString(n.String())
		body.WriteByte('\n')
	}
	for _, p := range t.Parts {
		body.WriteString(p.String())
		body.WriteByte('\n')
	}
	var s Signature
	copy(s.MAC[:], computeMAC(key, nonce, body.Bytes()))
	body.WriteString(s.String())
	body.WriteByte('\n')
	return body.Bytes(), nil
}
