package bmc

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func testKey() []byte {
	k := make([]byte, KeySize)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

const testNonce = "abcdefghijklmnop"

func sampleTable(t testing.TB) *Table {
	n1 := HandleFor([]byte("peer-1"))
	n2 := HandleFor([]byte("peer-2"))
	model := HandleFor([]byte("model-cid"))
	return &Table{
		Boot: 3, Seq: 42, Uptime: 123456 * time.Millisecond, Period: 3 * time.Second, Misses: 2,
		Nodes: []Node{{n1, true, 1200 * time.Millisecond, 4}, {n2, false, 7001 * time.Millisecond, 0}},
		Parts: []Partition{{n1, model, 0, 14}, {n2, model, 14, 28}},
	}
}

func TestSignVerifyGolden(t *testing.T) {
	raw, err := SignTable(testKey(), testNonce, sampleTable(t))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(raw, want) {
		t.Fatalf("SignTable drifted from %s:\n%s\nwant:\n%s", golden, raw, want)
	}
	got, err := VerifyTable(testKey(), testNonce, raw)
	if err != nil {
		t.Fatal(err)
	}
	want2 := sampleTable(t)
	if got.Boot != want2.Boot || got.Seq != want2.Seq || got.Uptime != want2.Uptime ||
		got.Period != want2.Period || got.Misses != want2.Misses || len(got.Nodes) != 2 || len(got.Parts) != 2 ||
		got.Nodes[1] != want2.Nodes[1] || got.Parts[1] != want2.Parts[1] || got.Nonce != testNonce {
		t.Fatalf("VerifyTable = %+v", got)
	}
	if !got.Live(want2.Nodes[0].Handle) || !got.Dead(want2.Nodes[1].Handle) || got.Live(HandleFor([]byte("x"))) || got.Dead(HandleFor([]byte("x"))) {
		t.Fatal("Live/Dead disagree with the nodes")
	}
	if len(got.PartsOf(want2.Parts[0].Model)) != 2 {
		t.Fatal("PartsOf")
	}
	// CRLF, as it comes off the wire, verifies the same.
	if _, err := VerifyTable(testKey(), testNonce, bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n"))); err != nil {
		t.Fatalf("CRLF dump: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	key := testKey()
	raw, err := SignTable(key, testNonce, sampleTable(t))
	if err != nil {
		t.Fatal(err)
	}
	otherKey := bytes.Clone(key)
	otherKey[0] ^= 1
	tests := []struct {
		name  string
		key   []byte
		nonce string
		raw   []byte
	}{
		{"replayed under another nonce", key, "ponmlkjihgfedcba", raw},
		{"other key", otherKey, testNonce, raw},
		{"truncated", key, testNonce, raw[:len(raw)/2]},
		{"no signature", key, testNonce, raw[:bytes.LastIndex(raw[:len(raw)-1], []byte("\n"))+1]},
		{"empty", key, testNonce, nil},
		{"extra line", key, testNonce, append([]byte("N 0123456789ab L 1 1\n"), raw...)},
	}
	for _, tt := range tests {
		if _, err := VerifyTable(tt.key, tt.nonce, tt.raw); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	// Every single-bit flip anywhere is rejected.
	for i := range raw {
		for bit := 0; bit < 8; bit++ {
			bad := bytes.Clone(raw)
			bad[i] ^= 1 << bit
			if _, err := VerifyTable(key, testNonce, bad); err == nil {
				t.Fatalf("flip of bit %d of byte %d (%q) accepted", bit, i, raw[i])
			}
		}
	}
	if _, err := VerifyTable(key, "ponmlkjihgfedcba", raw); !errors.Is(err, ErrBadMAC) {
		t.Fatalf("replay: %v, want ErrBadMAC", err)
	}
}

func TestParseTableStructure(t *testing.T) {
	key := testKey()
	tab := sampleTable(t)
	tab.Nodes = append(tab.Nodes, tab.Nodes[0]) // duplicate node
	raw, err := SignTable(key, testNonce, tab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyTable(key, testNonce, raw); !errors.Is(err, ErrMalformed) {
		t.Fatalf("duplicate node: %v, want ErrMalformed", err)
	}
	empty, err := SignTable(key, testNonce, &Table{Boot: 1, Period: time.Second, Misses: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyTable(key, testNonce, empty)
	if err != nil || len(got.Nodes) != 0 || len(got.Parts) != 0 {
		t.Fatalf("empty table: %+v, %v", got, err)
	}
}

func TestNewer(t *testing.T) {
	a := &Table{Boot: 2, Seq: 5, Uptime: time.Second}
	tests := []struct {
		b    Table
		want bool // b newer than a
	}{
		{Table{Boot: 3, Seq: 0}, true},
		{Table{Boot: 1, Seq: 99}, false},
		{Table{Boot: 2, Seq: 6}, true},
		{Table{Boot: 2, Seq: 4, Uptime: time.Hour}, false},
		{Table{Boot: 2, Seq: 5, Uptime: 2 * time.Second}, true},
		{Table{Boot: 2, Seq: 5, Uptime: time.Second}, false},
	}
	for _, tt := range tests {
		if got := tt.b.Newer(a); got != tt.want {
			t.Errorf("%+v.Newer(%+v) = %v", tt.b, a, got)
		}
	}
}
