// Package tiers holds the test that keeps the import order of
// ARCHITECTURE.md: lower tiers never import higher ones, only
// internal/engine imports ollama, swarmctl links neither libp2p nor cgo,
// and tier-0 packages build no libp2p host.
package tiers

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/llmswarm/llmswarm"

// tier of every package of the module (path relative to the module). A new
// package must be added here, so its place in the order is a decision.
var tier = map[string]int{
	"internal/engine":        0,
	"internal/version":       0,
	"internal/cli":           0,
	"internal/wire":          -1, // standard library only, under every package that frames or decodes (shards included)
	"internal/atomicfile":    -1, // a file replaced whole or not at all: stdlib only
	"internal/train":         -1, // trains the tiny models of the engine's fixtures: stdlib only
	"internal/train/fixture": 6,  // writes those fixtures (a tool, with the engine)
	"internal/netif":         0,
	"shards":                 0,
	"bmc":                    0,
	"answer":                 0, // a query's result and trace, and the kinds of failure: stdlib only
	"client":                 1, // the API client: answer's types, over HTTP
	"dashboard":              0, // static files and their handler, served by api
	"gossip":                 1,
	"ledger":                 1, // receipts and this peer's ledger of give and take
	"swarm":                  2,
	"moa":                    3,
	"pipeline":               3,
	"verify":                 3,
	"bmcauth":                3, // the BMC plane on the swarm side: gossip and the swarm view
	"nat":                    3, // the NAT plane: reachability, relays, hole punching
	"node":                   4,
	"api":                    5,
	"cmd/swarmd":             6,
	"cmd/swarmctl":           6,
	"mobile":                 6,
	// Test harnesses are exempt unless listed: nodetest starts peers with
	// their API, so it sits above api.
	"nodetest": 6,
}

// swarmctlMay are the module's packages swarmctl may link: the API client,
// the answers it returns, and the standard-library-only helpers both
// commands share.
var swarmctlMay = map[string]bool{"client": true, "answer": true, "internal/cli": true, "internal/version": true}

// exempt packages are test harnesses, not product code, unless the tier
// map lists them.
func exempt(rel string) bool {
	if _, listed := tier[rel]; listed {
		return false
	}
	return rel == "e2e" || strings.HasPrefix(rel, "internal/tiers") || strings.HasSuffix(rel, "test") ||
		strings.HasSuffix(rel, "sim") || strings.HasPrefix(rel, "e2e/")
}

type pkg struct {
	ImportPath string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	return pkgs
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// tierOf finds the tier of a package or of its closest listed parent.
func tierOf(r string) (int, string, bool) {
	for p := r; p != "."; {
		if t, ok := tier[p]; ok {
			return t, p, true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0, "", false
}

func TestImportTiers(t *testing.T) {
	for _, p := range listPackages(t) {
		r, _ := rel(p.ImportPath)
		if exempt(r) || len(p.GoFiles) == 0 {
			continue
		}
		own, family, ok := tierOf(r)
		if !ok {
			t.Errorf("package %s has no tier: add it to the tier map (and to ARCHITECTURE.md)", r)
			continue
		}
		for _, d := range p.Deps {
			dr, mine := rel(d)
			if !mine || exempt(dr) {
				continue
			}
			dt, dfam, ok := tierOf(dr)
			if !ok || dfam == family {
				continue
			}
			if dt >= own {
				t.Errorf("%s (tier %d) depends on %s (tier %d): lower tiers must not import higher or equal ones", r, own, dr, dt)
			}
		}
		for _, d := range p.Imports {
			if strings.HasPrefix(d, "github.com/ollama/ollama") && r != "internal/engine" {
				t.Errorf("%s imports %s: only internal/engine may import ollama", r, d)
			}
		}
		if own <= 0 {
			for _, d := range p.Deps {
				if d == "github.com/libp2p/go-libp2p" || strings.HasPrefix(d, "github.com/libp2p/go-libp2p/p2p/host/basic") {
					t.Errorf("tier-0 package %s depends on %s: it must not build libp2p hosts", r, d)
				}
			}
		}
		if r == "cmd/swarmctl" {
			for _, d := range p.Deps {
				dr, mine := rel(d)
				if strings.Contains(d, "libp2p") || strings.Contains(d, "ollama") ||
					(mine && !swarmctlMay[dr]) {
					t.Errorf("swarmctl depends on %s: it may link only the API client (no libp2p, no cgo)", d)
				}
			}
		}
	}
}

// TestSwarmctlBuildsWithoutCgo builds swarmctl with cgo off: it must need
// none (the net package's cgo resolver is optional).
func TestSwarmctlBuildsWithoutCgo(t *testing.T) {
	cmd := exec.Command("go", "build", "-o", t.TempDir()+"/swarmctl", "./cmd/swarmctl")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("swarmctl does not build with CGO_ENABLED=0: %v\n%s", err, out)
	}
}
