// Package docstest reads the project's Markdown documentation (README.md
// and docs/*.md) for the tests that keep it true to the code: every config
// key, swarmd flag and swarmctl command documented, and nothing documented
// that does not exist. It knows only the Markdown this project writes:
// ATX headings, fenced code blocks, pipe tables and inline code spans.
// It uses only the standard library and is imported only by tests.
package docstest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Page is one Markdown file, split into lines.
type Page struct {
	Path  string
	Lines []string
}

// Read reads one Markdown file.
func Read(path string) (Page, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Page{}, fmt.Errorf("docstest: %w", err)
	}
	return Page{Path: path, Lines: strings.Split(string(b), "\n")}, nil
}

// ReadAll reads root/README.md and every root/docs/*.md, in that order.
func ReadAll(root string) ([]Page, error) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("docstest: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("docstest: no pages in %s", filepath.Join(root, "docs"))
	}
	sort.Strings(paths)
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	pages := make([]Page, 0, len(paths))
	for _, p := range paths {
		pg, err := Read(p)
		if err != nil {
			return nil, err
		}
		pages = append(pages, pg)
	}
	return pages, nil
}

// Where names a line of a page, as file:line.
func (p Page) Where(line int) string { return fmt.Sprintf("%s:%d", p.Path, line) }

// fence reports whether line opens or closes a fenced code block, and the
// info string after an opening fence.
func fence(line string) (info string, ok bool) {
	if !strings.HasPrefix(line, "```") {
		return "", false
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "```")), true
}

// Section is the text under one heading, up to the next heading of any
// level. Heading is the heading's text without its #s; the lines before
// the first heading form a section with Level 0.
type Section struct {
	Heading string
	Level   int
	Line    int // 1-based line of the heading
	Tables  []Table
}

// Table is a pipe table: its header cells and its rows' cells.
type Table struct {
	Header []string
	Rows   []Row
}

// Row is one body row of a table.
type Row struct {
	Line  int // 1-based
	Cells []string
}

var headingRE = regexp.MustCompile(`^(#{1,6}) +(.*?) *#*$`)

// Sections splits the page at its headings (outside code blocks) and
// collects each section's tables.
func (p Page) Sections() []Section {
	secs := []Section{{}}
	in := false
	var tbl *Table
	for i, l := range p.Lines {
		if _, ok := fence(l); ok {
			in = !in
			tbl = nil
			continue
		}
		if in {
			continue
		}
		if m := headingRE.FindStringSubmatch(l); m != nil {
			secs = append(secs, Section{Heading: m[2], Level: len(m[1]), Line: i + 1})
			tbl = nil
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(l), "|") {
			tbl = nil
			continue
		}
		cells := SplitRow(l)
		cur := &secs[len(secs)-1]
		switch {
		case tbl == nil:
			cur.Tables = append(cur.Tables, Table{Header: cells})
			tbl = &cur.Tables[len(cur.Tables)-1]
		case isDelimiter(cells):
		default:
			tbl.Rows = append(tbl.Rows, Row{Line: i + 1, Cells: cells})
		}
	}
	return secs
}

var delimRE = regexp.MustCompile(`^:?-+:?$`)

func isDelimiter(cells []string) bool {
	for _, c := range cells {
		if !delimRE.MatchString(c) {
			return false
		}
	}
	return len(cells) > 0
}

// SplitRow splits a table row at its unescaped pipes and trims each cell.
// An escaped pipe (\|) stays in its cell as \|; Spans unescapes it.
func SplitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// Spans returns the inline code spans of a piece of Markdown text (single
// backticks), with \| unescaped to | as a table cell means it.
func Spans(text string) []string {
	var out []string
	for {
		i := strings.IndexByte(text, '`')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(text[i+1:], '`')
		if j < 0 {
			return out
		}
		out = append(out, strings.ReplaceAll(text[i+1:i+1+j], `\|`, "|"))
		text = text[i+1+j+1:]
	}
}

// HeadingCommand returns the command a heading names when the heading is
// exactly one code span (### `swarmd model synth`), else "".
func HeadingCommand(heading string) string {
	if len(heading) < 2 || heading[0] != '`' || heading[len(heading)-1] != '`' {
		return ""
	}
	s := heading[1 : len(heading)-1]
	if strings.Contains(s, "`") {
		return ""
	}
	return s
}

// Code is a piece of code in a page: an inline code span (which may run
// over a line break) or one line of a fenced code block, with a shell
// comment cut off.
type Code struct {
	Line   int    // 1-based line where it starts
	Text   string // its text; a line break inside a span is a space
	Fenced bool
	Info   string // the fence's info string (e.g. "sh", "json"); "" for a span
}

// Code returns every code span and every line of every fenced block.
func (p Page) Code() []Code {
	var out []Code
	in, info := false, ""
	var para []string // prose lines since the last fence, for spans
	start := 0
	flush := func() {
		out = append(out, spansWithLines(para, start)...)
		para = nil
	}
	for i, l := range p.Lines {
		if inf, ok := fence(l); ok {
			if !in {
				flush()
				info = inf
			}
			in = !in
			continue
		}
		if in {
			out = append(out, Code{Line: i + 1, Text: cutComment(l), Fenced: true, Info: info})
			continue
		}
		if para == nil {
			start = i
		}
		para = append(para, l)
	}
	flush()
	return out
}

// spansWithLines finds the code spans of consecutive prose lines, the
// first of which has index first (line first+1).
func spansWithLines(lines []string, first int) []Code {
	var out []Code
	text := strings.Join(lines, "\n")
	line := first + 1
	for {
		i := strings.IndexByte(text, '`')
		if i < 0 {
			return out
		}
		line += strings.Count(text[:i], "\n")
		j := strings.IndexByte(text[i+1:], '`')
		if j < 0 {
			return out
		}
		body := text[i+1 : i+1+j]
		out = append(out, Code{Line: line, Text: strings.ReplaceAll(strings.ReplaceAll(body, "\n", " "), `\|`, "|")})
		line += strings.Count(body, "\n")
		text = text[i+1+j+1:]
	}
}

// cutComment cuts a shell comment (# at the start or after a space) off a
// line of code.
func cutComment(l string) string {
	if strings.HasPrefix(strings.TrimSpace(l), "#") {
		return ""
	}
	if i := strings.Index(l, " #"); i >= 0 {
		return l[:i]
	}
	return l
}

// Invocation is a command line of prog found in some code: the words after
// prog, up to the end of the command (a pipe, ;, & or the end).
type Invocation struct {
	Line int
	Args []string
}

var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// Invocations finds the command lines of prog in code: prog as the command
// word (possibly with a path before it: bin/swarmd, or a systemd
// ExecStart=/usr/local/bin/swarmd), first in the code or after a pipe, ;
// or &&, after any VAR=value words and sudo. prog as an argument (install
// swarmd /usr/local/bin) or inside a message (waiting for swarmd at ADDR)
// is not a command line. Quoted words stay one word, without quotes.
func Invocations(code Code, prog string) []Invocation {
	var out []Invocation
	words := shellWords(code.Text)
	command := true // the next word is in a command word's place
	for i, w := range words {
		switch {
		case isOperator(w):
			command = true
			continue
		case !command:
			continue
		case w == prog || strings.HasSuffix(w, "/"+prog):
		case w == "sudo" || envRE.MatchString(w):
			continue
		default:
			command = false
			continue
		}
		command = false
		var args []string
		for _, a := range words[i+1:] {
			if isOperator(a) {
				break
			}
			args = append(args, a)
		}
		out = append(out, Invocation{Line: code.Line, Args: args})
	}
	return out
}

func isOperator(w string) bool {
	return w == "|" || w == ";" || w == "&" || w == "&&" || w == "||"
}

// shellWords splits a line as a shell roughly would: spaces separate
// words, quotes group them, and |, ;, & stand alone.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	has := false
	emit := func() {
		if has {
			words = append(words, cur.String())
		}
		cur.Reset()
		has = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\'':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			has = true
			i += j + 1
		case c == ' ' || c == '\t':
			emit()
		case c == '|' || c == ';' || c == '&':
			// a pipe inside a word (qwen3|qwen2) is an alternative, not a pipe
			if has && i+1 < len(s) && s[i+1] != ' ' && c == '|' {
				cur.WriteByte(c)
				continue
			}
			emit()
			op := string(c)
			if i+1 < len(s) && s[i+1] == c {
				op += string(c)
				i++
			}
			words = append(words, op)
		default:
			cur.WriteByte(c)
			has = true
		}
	}
	emit()
	return words
}

var flagRE = regexp.MustCompile(`^\[*(--?)([A-Za-z0-9][A-Za-z0-9-]*)(=?)`)

// Flag reads a word of a command line as a flag: its name without dashes
// and whether its value is in the word (--n=3). A word like [--seed or
// --speculate[=false] is a flag too; - and -- are not.
func Flag(word string) (name string, inline, ok bool) {
	m := flagRE.FindStringSubmatch(word)
	if m == nil {
		return "", false, false
	}
	return m[2], m[3] == "=" || strings.Contains(word, "[="), true
}

// Flags are a command's flags: name → whether it takes a value.
type Flags map[string]bool

// ParseDefaults reads the flags a flag.FlagSet's PrintDefaults wrote (as
// a command's -h prints them): lines "  -name" for a bool flag, "  -name
// VALUE" for one that takes a value.
func ParseDefaults(out string) Flags {
	flags := Flags{}
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "  -") {
			continue
		}
		head, _, _ := strings.Cut(l[3:], "\t")
		name, value, _ := strings.Cut(head, " ")
		flags[name] = strings.TrimSpace(value) != ""
	}
	return flags
}

// Args reads a documented command line's words after the command: its
// positional words, and the flags it names that are not in flags. A flag
// that takes a value takes the next word, unless the value is inline
// (--n=3). -h and -help are every command's. Reading stops at "--".
func Args(words []string, flags Flags) (pos, unknown []string) {
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			break
		}
		name, inline, ok := Flag(w)
		if !ok {
			pos = append(pos, w)
			continue
		}
		takes, known := flags[name]
		switch {
		case name == "h" || name == "help":
		case !known:
			unknown = append(unknown, name)
		case takes && !inline:
			i++
		}
	}
	return pos, unknown
}
