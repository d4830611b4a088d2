package api

import "testing"

func TestCheckJSONObject(t *testing.T) {
	cases := []struct {
		text string
		ok   bool
	}{
		{`{"a": 1}`, true},
		{"\n  {\"a\": [1, 2]}\n", true},
		{`[1, 2]`, false},
		{`"just a string"`, false},
		{`{"a": 1`, false},
		{"Sure! {\"a\": 1}", false},
		{"", false},
	}
	for _, tc := range cases {
		if err := checkJSONObject(tc.text); (err == nil) != tc.ok {
			t.Errorf("checkJSONObject(%q) = %v, want ok=%v", tc.text, err, tc.ok)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	cases := map[string]bool{
		"localhost": true, "localhost:7433": true, "LocalHost.:80": true, "127.0.0.1": true,
		"127.1.2.3:9": true, "[::1]:7433": true, "[::1]": true,
		"": false, "evil.example": false, "localhost.evil.example": false, "10.0.0.1:7433": false,
		"[::2]:80": false, "0.0.0.0:7433": false, "127.0.0.1.nip.io": false,
	}
	for host, want := range cases {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
