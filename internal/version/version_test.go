package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	rev := "58e9a4a1b2c3d4e5f60718293a4b5c6d7e8f9012"
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "v0.1.0"},
		{"vcs", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "rev 58e9a4a1b2c3"},
		{"vcs modified", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "rev 58e9a4a1b2c3, modified"},
		{"pseudo-version and vcs", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123-58e9a4a1b2c3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}}}, "v0.0.0-20261123-58e9a4a1b2c3, rev 58e9a4a1b2c3"},
		{"nothing", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown build"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := describe(&c.bi); got != c.want {
				t.Fatalf("describe = %q, want %q", got, c.want)
			}
		})
	}
	if s := String(); !strings.HasPrefix(s, Release+" (") {
		t.Fatalf("String() = %q", s)
	}
}
