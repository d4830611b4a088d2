package bmc

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Protocol limits, shared with the firmware (bmc/firmware/bmc/bmc.ino).
const (
	// ProtocolVersion is the "proto=" the firmware reports in INFO.
	ProtocolVersion = 1
	// MaxRequest is the longest request line in bytes, LF included: the
	// Uno's receive ring holds 63 bytes and there is no flow control.
	MaxRequest = 63
	// MaxReply is the longest reply line in characters, CRLF excluded.
	MaxReply = 62
	// MaxNodes and MaxParts are the firmware's table sizes (also in INFO).
	MaxNodes = 32
	MaxParts = 32
	// KeySize is the HMAC key size provisioned into the board.
	KeySize = 32
	// MinPeriod and MaxPeriod bound the heartbeat period CFG accepts.
	MinPeriod = 100 * time.Millisecond
	MaxPeriod = 65535 * time.Millisecond
	// MaxMisses bounds the missed-beat count CFG accepts (minimum 1).
	MaxMisses = 255
	// DefaultPeriod and DefaultMisses are the board's settings after reset.
	DefaultPeriod = 3 * time.Second
	DefaultMisses = 2
	// MaxLayer is the largest layer bound a partition can carry.
	MaxLayer = 65535

	nonceMin = 16
	nonceMax = 32
	tokenMax = 16
)

var b64 = base64.RawURLEncoding

// isToken reports whether s is n characters of the base64url alphabet with
// min <= n <= max: what the board accepts as a PING token or TAB nonce.
func isToken(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func request(words ...string) ([]byte, error) {
	line := strings.Join(words, " ") + "\n"
	if len(line) > MaxRequest {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLong, len(line), MaxRequest)
	}
	return []byte(line), nil
}

// EncodePing encodes "PING [token]"; the board echoes the token, which is
// how the bridge resynchronises after a timeout.
func EncodePing(token string) ([]byte, error) {
	if token == "" {
		return request("PING")
	}
	if !isToken(token, 1, tokenMax) {
		return nil, fmt.Errorf("%w: ping token %q", ErrMalformed, token)
	}
	return request("PING", token)
}

// EncodeHeartbeat encodes "HB <node> <load>".
func EncodeHeartbeat(node Handle, load uint8) ([]byte, error) {
	return request("HB", node.String(), strconv.Itoa(int(load)))
}

// EncodeSetPartition encodes "PSET <node> <model> <first> <end>".
func EncodeSetPartition(p Partition) ([]byte, error) {
	if p.First >= p.End {
		return nil, fmt.Errorf("%w: layers [%d,%d) empty", ErrMalformed, p.First, p.End)
	}
	return request("PSET", p.Node.String(), p.Model.String(),
		strconv.Itoa(int(p.First)), strconv.Itoa(int(p.End)))
}

// EncodeDeletePartition encodes "PDEL <node> <model>".
func EncodeDeletePartition(node, model Handle) ([]byte, error) {
	return request("PDEL", node.String(), model.String())
}

// EncodeForgetNode encodes "NDEL <node>".
func EncodeForgetNode(node Handle) ([]byte, error) { return request("NDEL", node.String()) }

// EncodeConfig encodes "CFG <period_ms> <misses>".
func EncodeConfig(c Config) ([]byte, error) {
	if c.Period < MinPeriod || c.Period > MaxPeriod || c.Period%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: period %v outside [%v,%v] or not whole ms", ErrMalformed, c.Period, MinPeriod, MaxPeriod)
	}
	if c.Misses < 1 || c.Misses > MaxMisses {
		return nil, fmt.Errorf("%w: misses %d outside [1,%d]", ErrMalformed, c.Misses, MaxMisses)
	}
	return request("CFG", strconv.FormatInt(c.Period.Milliseconds(), 10), strconv.Itoa(c.Misses))
}

// EncodeTab encodes "TAB <nonce>"; the nonce is 16 to 32 base64url characters.
func EncodeTab(nonce string) ([]byte, error) {
	if !isToken(nonce, nonceMin, nonceMax) {
		return nil, fmt.Errorf("%w: nonce %q", ErrMalformed, nonce)
	}
	return request("TAB", nonce)
}

// EncodeKey encodes "KEY <base64url key>".
func EncodeKey(key []byte) ([]byte, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: key is %d bytes, want %d", ErrMalformed, len(key), KeySize)
	}
	return request("KEY", b64.EncodeToString(key))
}

// Reply is one line from the board, as returned by ParseLine. String gives
// back the canonical line (without CRLF).
type Reply interface {
	String() string
	reply()
}

// Ready is the line the board prints when it boots.
type Ready struct {
	FW   string
	Boot uint32
}

// Pong answers PING: the board's uptime and the echoed token.
type Pong struct {
	Uptime time.Duration
	Token  string
}

// Info answers INFO.
type Info struct {
	Proto    int
	FW       string
	Boot     uint32 // EEPROM counter, +1 at every reset
	Keyed    bool   // a key is provisioned
	MaxNodes int
	MaxParts int
}

// Stat answers STAT.
type Stat struct {
	Seq     uint32
	Nodes   int
	Parts   int
	FreeRAM int           // bytes never touched by the stack since boot
	MACTime time.Duration // HMAC time of the last TAB, on the board's clock
}

// Config is the liveness rule: a node is dead once silent for more than
// Period*Misses. It answers a bare CFG.
type Config struct {
	Period time.Duration
	Misses int
}

// OK acknowledges a request; Seq is the table's sequence number after it.
type OK struct{ Seq uint32 }

// ErrorReply is "ERR <code>".
type ErrorReply struct{ Code string }

// Header is the first line of a table dump.
type Header struct {
	Boot   uint32
	Seq    uint32
	Uptime time.Duration
	Config
}

// Node is a liveness entry of a table dump.
type Node struct {
	Handle Handle
	Live   bool
	Age    time.Duration // time since its last heartbeat, on the board's clock
	Load   uint8         // the value its last heartbeat carried
}

// Partition says Node holds layers [First, End) of Model.
type Partition struct {
	Node  Handle
	Model Handle
	First uint16
	End   uint16
}

// Signature is the last line of a table dump.
type Signature struct{ MAC [32]byte }

func (Ready) reply()      {}
func (Pong) reply()       {}
func (Info) reply()       {}
func (Stat) reply()       {}
func (Config) reply()     {}
func (OK) reply()         {}
func (ErrorReply) reply() {}
func (Header) reply()     {}
func (Node) reply()       {}
func (Partition) reply()  {}
func (Signature) reply()  {}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (r Ready) String() string { return fmt.Sprintf("READY fw=%s boot=%d", r.FW, r.Boot) }
func (r Pong) String() string {
	if r.Token == "" {
		return "PONG " + ms(r.Uptime)
	}
	return "PONG " + ms(r.Uptime) + " " + r.Token
}
func (r Info) String() string {
	return fmt.Sprintf("INFO proto=%d fw=%s boot=%d key=%s nmax=%d pmax=%d",
		r.Proto, r.FW, r.Boot, b01(r.Keyed), r.MaxNodes, r.MaxParts)
}
func (r Stat) String() string {
	return fmt.Sprintf("STAT seq=%d n=%d p=%d ram=%d mac=%d",
		r.Seq, r.Nodes, r.Parts, r.FreeRAM, r.MACTime.Microseconds())
}
func (r Config) String() string     { return "CFG " + ms(r.Period) + " " + strconv.Itoa(r.Misses) }
func (r OK) String() string         { return fmt.Sprintf("OK %d", r.Seq) }
func (r ErrorReply) String() string { return "ERR " + r.Code }
func (r Header) String() string {
	return fmt.Sprintf("T %d %d %s %s %d", r.Boot, r.Seq, ms(r.Uptime), ms(r.Period), r.Misses)
}
func (r Node) String() string {
	st := "D"
	if r.Live {
		st = "L"
	}
	return fmt.Sprintf("N %s %s %s %d", r.Handle, st, ms(r.Age), r.Load)
}
func (r Partition) String() string {
	return fmt.Sprintf("P %s %s %d %d", r.Node, r.Model, r.First, r.End)
}
func (r Signature) String() string { return "S " + b64.EncodeToString(r.MAC[:]) }

// parseUint parses canonical decimal (no sign, no leading zeros) up to max.
func parseUint(s string, max uint64) (uint64, bool) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > max {
		return 0, false
	}
	return v, true
}

const maxMillis = uint64(1<<63-1) / uint64(time.Millisecond)

// kv parses "key=value" with the given key.
func kv(field, key string) (string, bool) {
	v, ok := strings.CutPrefix(field, key+"=")
	return v, ok
}

func isVersion(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-' || c == '+') {
			return false
		}
	}
	return true
}

func isCode(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// ParseLine parses one line from the board, without its line terminator.
// Parsing is strict (single spaces, canonical numbers, fixed field order), so
// for every line it accepts, String gives back the same bytes; anything else
// is a *ParseError, which the bridge treats as line noise and skips.
func ParseLine(line string) (Reply, error) {
	if len(line) > MaxReply {
		return nil, malformed(line, "longer than %d characters", MaxReply)
	}
	f := strings.Split(line, " ")
	bad := func(why string) (Reply, error) { return nil, malformed(line, "%s", why) }
	u32 := func(s string) (uint32, bool) { v, ok := parseUint(s, 1<<32-1); return uint32(v), ok }
	switch f[0] {
	case "READY":
		if len(f) != 3 {
			return bad("READY wants 2 fields")
		}
		fw, ok1 := kv(f[1], "fw")
		bs, ok2 := kv(f[2], "boot")
		boot, ok3 := u32(bs)
		if !ok1 || !ok2 || !ok3 || !isVersion(fw) {
			return bad("bad READY field")
		}
		return Ready{FW: fw, Boot: boot}, nil
	case "PONG":
		if len(f) != 2 && len(f) != 3 {
			return bad("PONG wants 1 or 2 fields")
		}
		up, ok := parseUint(f[1], maxMillis)
		if !ok {
			return bad("bad uptime")
		}
		p := Pong{Uptime: time.Duration(up) * time.Millisecond}
		if len(f) == 3 {
			if !isToken(f[2], 1, tokenMax) {
				return bad("bad token")
			}
			p.Token = f[2]
		}
		return p, nil
	case "INFO":
		if len(f) != 7 {
			return bad("INFO wants 6 fields")
		}
		var in Info
		var vals [6]string
		for i, k := range []string{"proto", "fw", "boot", "key", "nmax", "pmax"} {
			v, ok := kv(f[i+1], k)
			if !ok {
				return bad("INFO field " + k)
			}
			vals[i] = v
		}
		proto, ok1 := parseUint(vals[0], 255)
		boot, ok2 := u32(vals[2])
		nmax, ok3 := parseUint(vals[4], 255)
		pmax, ok4 := parseUint(vals[5], 255)
		if !ok1 || !ok2 || !ok3 || !ok4 || !isVersion(vals[1]) || (vals[3] != "0" && vals[3] != "1") {
			return bad("bad INFO value")
		}
		in = Info{Proto: int(proto), FW: vals[1], Boot: boot, Keyed: vals[3] == "1", MaxNodes: int(nmax), MaxParts: int(pmax)}
		return in, nil
	case "STAT":
		if len(f) != 6 {
			return bad("STAT wants 5 fields")
		}
		var v [5]uint64
		for i, k := range []string{"seq", "n", "p", "ram", "mac"} {
			s, ok := kv(f[i+1], k)
			if !ok {
				return bad("STAT field " + k)
			}
			if v[i], ok = parseUint(s, 1<<32-1); !ok {
				return bad("bad STAT value")
			}
		}
		return Stat{Seq: uint32(v[0]), Nodes: int(v[1]), Parts: int(v[2]), FreeRAM: int(v[3]),
			MACTime: time.Duration(v[4]) * time.Microsecond}, nil
	case "CFG":
		if len(f) != 3 {
			return bad("CFG wants 2 fields")
		}
		p, ok1 := parseUint(f[1], 65535)
		m, ok2 := parseUint(f[2], MaxMisses)
		if !ok1 || !ok2 {
			return bad("bad CFG value")
		}
		return Config{Period: time.Duration(p) * time.Millisecond, Misses: int(m)}, nil
	case "OK":
		if len(f) != 2 {
			return bad("OK wants 1 field")
		}
		s, ok := u32(f[1])
		if !ok {
			return bad("bad seq")
		}
		return OK{Seq: s}, nil
	case "ERR":
		if len(f) != 2 || !isCode(f[1]) {
			return bad("bad ERR code")
		}
		return ErrorReply{Code: f[1]}, nil
	case "T":
		if len(f) != 6 {
			return bad("T wants 5 fields")
		}
		boot, ok1 := u32(f[1])
		seq, ok2 := u32(f[2])
		up, ok3 := parseUint(f[3], maxMillis)
		p, ok4 := parseUint(f[4], 65535)
		m, ok5 := parseUint(f[5], MaxMisses)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return bad("bad T value")
		}
		return Header{Boot: boot, Seq: seq, Uptime: time.Duration(up) * time.Millisecond,
			Config: Config{Period: time.Duration(p) * time.Millisecond, Misses: int(m)}}, nil
	case "N":
		if len(f) != 5 || (f[2] != "L" && f[2] != "D") {
			return bad("bad N line")
		}
		h, err := ParseHandle(f[1])
		age, ok1 := u32(f[3])
		load, ok2 := parseUint(f[4], 255)
		if err != nil || !ok1 || !ok2 {
			return bad("bad N value")
		}
		return Node{Handle: h, Live: f[2] == "L", Age: time.Duration(age) * time.Millisecond, Load: uint8(load)}, nil
	case "P":
		if len(f) != 5 {
			return bad("P wants 4 fields")
		}
		n, err1 := ParseHandle(f[1])
		m, err2 := ParseHandle(f[2])
		a, ok1 := parseUint(f[3], MaxLayer)
		b, ok2 := parseUint(f[4], MaxLayer)
		if err1 != nil || err2 != nil || !ok1 || !ok2 || a >= b {
			return bad("bad P value")
		}
		return Partition{Node: n, Model: m, First: uint16(a), End: uint16(b)}, nil
	case "S":
		if len(f) != 2 || len(f[1]) != 43 || !isToken(f[1], 43, 43) {
			return bad("bad S line")
		}
		mac, err := b64.Strict().DecodeString(f[1])
		if err != nil || len(mac) != 32 {
			return bad("bad MAC encoding")
		}
		var s Signature
		copy(s.MAC[:], mac)
		return s, nil
	}
	return bad("unknown reply")
}
