package node

import (
	"encoding/json"
	"maps"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/docstest"
)

// configKeys walks the JSON shape of t as encoding/json reads it: every
// leaf key as a dotted path (engine.threads), and every key that only
// holds other keys (engine) as a section. A type that reads its own JSON
// (Duration) is a leaf; so is a map or slice of non-structs. A map of
// structs would add a * segment for its keys.
func configKeys(t reflect.Type, prefix string, leaves, sections map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			configKeys(ft, prefix, leaves, sections) // embedded: its keys are the parent's
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		switch elem := structIn(ft); {
		case elem == nil:
			leaves[key] = true
		case ft.Kind() == reflect.Map:
			sections[key] = true
			configKeys(elem, key+".*.", leaves, sections)
		default:
			sections[key] = true
			configKeys(elem, key+".", leaves, sections)
		}
	}
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// structIn returns the struct a field's JSON holds keys of (the field's
// own type, or the element of its map or slice), or nil for a leaf.
func structIn(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Map || t.Kind() == reflect.Slice {
		t = t.Elem()
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil
	}
	return t
}

var docKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.([a-z][a-z0-9_]*|\*))*$`)

// documentedKeys reads docs/config.md's key tables: tables whose header's
// first cell is "key". Each row's first cell holds one or more keys, each
// a code span of its own (`conn_low`, `conn_high`), and nothing else.
func documentedKeys(t *testing.T, page docstest.Page) map[string]int {
	t.Helper()
	keys := map[string]int{}
	tables := 0
	for _, sec := range page.Sections() {
		for _, tbl := range sec.Tables {
			if len(tbl.Header) == 0 || tbl.Header[0] != "key" {
				continue
			}
			tables++
			for _, row := range tbl.Rows {
				cell := row.Cells[0]
				spans := docstest.Spans(cell)
				rest := cell
				for _, s := range spans {
					rest = strings.Replace(rest, "`"+s+"`", "", 1)
				}
				if len(spans) == 0 || strings.Trim(rest, ", ") != "" {
					t.Errorf("%s: the first cell %q must hold only keys, each in backticks, separated by commas", page.Where(row.Line), cell)
					continue
				}
				for _, s := range spans {
					if !docKeyRE.MatchString(s) {
						t.Errorf("%s: %q is not a config key (dotted lower_case names)", page.Where(row.Line), s)
						continue
					}
					if prev, dup := keys[s]; dup {
						t.Errorf("%s: key %s is documented twice (also line %d)", page.Where(row.Line), s, prev)
					}
					keys[s] = row.Line
				}
			}
		}
	}
	if tables == 0 {
		t.Fatalf("%s has no table of keys (a table whose header starts with | key |)", page.Path)
	}
	return keys
}

// TestDocConfigKeys: every JSON key of Config has a row in docs/config.md,
// and every key a row names exists. A key that only holds others
// (engine) is documented by its own keys (engine.threads...).
func TestDocConfigKeys(t *testing.T) {
	page, err := docstest.Read("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	leaves, sections := map[string]bool{}, map[string]bool{}
	configKeys(reflect.TypeFor[Config](), "", leaves, sections)
	if len(leaves) < 50 || !leaves["pipeline.spot_check"] || !sections["engine"] {
		t.Fatalf("walked %d keys, %d sections: the walk of Config is broken", len(leaves), len(sections))
	}
	doc := documentedKeys(t, page)
	var missing []string
	for k := range leaves {
		if _, ok := doc[k]; !ok {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("config key %s is not documented in %s (add a row: | `%s` | type | default | meaning |)", k, page.Path, k)
	}
	for k, line := range doc {
		switch {
		case sections[k]:
			t.Errorf("%s: %s holds other keys: document each of them instead", page.Where(line), k)
		case !leaves[k]:
			t.Errorf("%s: %s is not a key of node.Config", page.Where(line), k)
		}
	}
}

// TestDocConfigMentions: a config key named in code anywhere in README.md
// or docs/ (`pipeline.spot_check`, or a pattern such as `progress.*`)
// exists. Only spans that begin with a section's name are taken as keys;
// one with a .json in it is a file (trust.json, trust.json.bad).
func TestDocConfigMentions(t *testing.T) {
	pages, err := docstest.ReadAll("..")
	if err != nil {
		t.Fatal(err)
	}
	leaves, sections := map[string]bool{}, map[string]bool{}
	configKeys(reflect.TypeFor[Config](), "", leaves, sections)
	mention := regexp.MustCompile(`^([a-z][a-z0-9_]*)\.[a-z0-9_.*]+$`)
	checked := 0
	for _, pg := range pages {
		for _, c := range pg.Code() {
			if c.Fenced {
				continue
			}
			m := mention.FindStringSubmatch(c.Text)
			if m == nil || !sections[m[1]] || strings.Contains(c.Text, ".json") {
				continue
			}
			checked++
			if !matchesKey(c.Text, leaves, sections) {
				t.Errorf("%s: `%s` names no config key of node.Config", pg.Where(c.Line), c.Text)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d mentions of config keys: the page reader is broken", checked)
	}
}

// matchesKey reports whether a key or a pattern (* for any part of a name)
// names at least one key or section.
func matchesKey(pat string, leaves, sections map[string]bool) bool {
	for _, set := range []map[string]bool{leaves, sections} {
		for k := range set {
			if ok, _ := path.Match(strings.ReplaceAll(pat, ".", "/"), strings.ReplaceAll(k, ".", "/")); ok {
				return true
			}
		}
	}
	return false
}

// TestDocConfigExamples: every ```json block in README.md and docs/ is a
// config file swarmd accepts (ParseConfig: unknown keys are errors), so an
// example cannot name a key that does not exist. Other JSON belongs in a
// block with another info string.
func TestDocConfigExamples(t *testing.T) {
	pages, err := docstest.ReadAll("..")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pg := range pages {
		var block []string
		first := 0
		for _, c := range pg.Code() {
			if !c.Fenced || c.Info != "json" {
				continue
			}
			if len(block) > 0 && c.Line != first+len(block) {
				n += checkExample(t, pg, first, block)
				block = nil
			}
			if len(block) == 0 {
				first = c.Line
			}
			block = append(block, c.Text)
		}
		if len(block) > 0 {
			n += checkExample(t, pg, first, block)
		}
	}
	if n < 2 {
		t.Fatalf("found %d config examples, want the one in docs/config.md and the Raspberry Pi's", n)
	}
}

func checkExample(t *testing.T, pg docstest.Page, line int, block []string) int {
	t.Helper()
	if _, err := ParseConfig([]byte(strings.Join(block, "\n"))); err != nil {
		t.Errorf("%s: the ```json example is not a config swarmd accepts: %v", pg.Where(line), err)
	}
	return 1
}

// TestConfigKeysWalk: the walk follows encoding/json: tags, embedded
// structs, pointers, types that read their own JSON, maps of structs.
func TestConfigKeysWalk(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type Embedded struct {
		E string `json:"e"`
	}
	type cfg struct {
		Embedded
		X    Duration         `json:"x"`
		P    *inner           `json:"p"`
		M    map[string]inner `json:"m"`
		S    []string         `json:"s"`
		Skip int              `json:"-"`
		Bare int
		priv int
	}
	leaves, sections := map[string]bool{}, map[string]bool{}
	configKeys(reflect.TypeFor[cfg](), "", leaves, sections)
	got := slices.Sorted(maps.Keys(leaves))
	want := []string{"Bare", "e", "m.*.a", "p.a", "s", "x"}
	if !slices.Equal(got, want) || !sections["p"] || !sections["m"] {
		t.Fatalf("leaves %v, sections %v; want leaves %v and sections p, m", got, sections, want)
	}
}
