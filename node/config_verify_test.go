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

func TestTrustConfig(t *testing.T) {
	if !(TrustConfig{}).challenges() {
		t.Fatal("challenges are off by default")
	}
	off := false
	c := Config{DataDir: "/d", Trust: TrustConfig{Challenges: &off, CheckLayers: 3, Tolerance: 1e-4, Tokens: 4,
		Ban: Duration(time.Minute), MaxBan: Duration(time.Hour)}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"trust":{"challenges":false,"check_layers":3,"tolerance":0.0001,"tokens":4,"ban":"1m0s","max_ban":"1h0m0s"}`) {
		t.Fatalf("trust keys: %s", b)
	}
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, b, 0o600)
	got, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) || got.Trust.challenges() {
		t.Fatalf("round trip: %+v", got.Trust)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		tr   TrustConfig
		want string
	}{
		{TrustConfig{CheckLayers: -1}, "trust.check_layers"},
		{TrustConfig{Tolerance: 2}, "trust.tolerance"},
		{TrustConfig{Tokens: 9}, "trust.tokens"},
		{TrustConfig{Ban: Duration(time.Millisecond)}, "trust.ban"},
		{TrustConfig{Ban: Duration(time.Hour), MaxBan: Duration(time.Minute)}, "trust.max_ban"},
	} {
		if err := (Config{DataDir: dir, Trust: tc.tr}).Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.tr, err, tc.want)
		}
	}
}
