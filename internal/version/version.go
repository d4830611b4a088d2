// Package version names the build of swarmd and swarmctl: the release
// number, then the module version or the VCS revision the binary was built
// from, read from the binary itself (runtime/debug.ReadBuildInfo). Both
// commands print the same string, so a mismatched pair is visible.
package version

import (
	"runtime/debug"
	"strings"
)

// Release is the protocol-facing version peers announce.
const Release = "0.1.0"

// String is the version a command prints: "0.1.0 (rev 58e9a4a1b2c3,
// modified)", "0.1.0 (v0.1.0)" for a module built at a tagged version, or
// "0.1.0 (unknown build)" when the binary carries no build information.
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Release + " (unknown build)"
	}
	return Release + " (" + describe(bi) + ")"
}

// describe says which build bi is.
func describe(bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var parts []string
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		parts = append(parts, v)
	}
	if rev := settings["vcs.revision"]; rev != "" {
		parts = append(parts, "rev "+rev[:min(12, len(rev))])
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	}
	if len(parts) == 0 {
		return "unknown build"
	}
	return strings.Join(parts, ", ")
}
