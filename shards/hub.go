package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Pulls from a model hub: Hugging Face's HTTP API, as its own clients use
// it. The file list comes from GET {endpoint}/api/models/{repo}/tree/{rev}
// (each LFS file with its sha256), the bytes from GET
// {endpoint}/{repo}/resolve/{rev}/{file}, which redirects to a CDN that
// honours Range. Downloads resume, stall-time out, retry, and are checked
// against the published sha256 before they are kept.

// DefaultHubEndpoint is Hugging Face.
const DefaultHubEndpoint = "https://huggingface.co"

// Hub is a model hub's HTTP API. The zero value talks to Hugging Face
// without a token.
type Hub struct {
	Endpoint string       // "" means DefaultHubEndpoint; HF_ENDPOINT in Hugging Face's clients
	Token    string       // sent as Authorization: Bearer to the hub (HF_TOKEN), never to a CDN on another host
	Client   *http.Client // nil: a client with connection timeouts
	// Stall ends a download attempt that receives nothing for this long
	// (0: 60 s); the next attempt resumes where it stopped.
	Stall time.Duration
	// Attempts bounds the tries of one download (0: 5).
	Attempts int
}

// HubFile is one file of a hub repo.
type HubFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // of an LFS file ("" for small git files)
}

// HubRef names a file of a hub repo: Repo is "owner/name"; File a path in
// it, or "" with Quant naming the quantization to pick ("Q4_K_M"), or
// neither (the repo's only GGUF, or the best that fits).
type HubRef struct {
	Repo     string
	File     string
	Quant    string
	Revision string // "" means main
}

func (r HubRef) String() string {
	s := "hf.co/" + r.Repo
	switch {
	case r.File != "":
		s += "/" + r.File
	case r.Quant != "":
		s += ":" + r.Quant
	}
	return s
}

// Errors of the hub; the messages say what to do.
var (
	ErrHubNotFound = errors.New("not found on the hub")
	ErrHubAuth     = errors.New("the hub wants a token")
	ErrHubHash     = errors.New("downloaded file does not match the hub's sha256")
	// ErrHubAmbiguous: the reference fits several files; it must name one.
	ErrHubAmbiguous = errors.New("more than one file fits")
	// ErrHubTooBig: no quant of the repo fits the memory left.
	ErrHubTooBig = errors.New("no quant fits")
)

var (
	repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	quantRE  = regexp.MustCompile(`^[A-Za-z0-9_]{1,16}$`)
)

// ParseHubRef reads "hf.co/OWNER/REPO[:QUANT]" or
// "hf.co/OWNER/REPO/PATH.gguf" (huggingface.co and https:// prefixes
// too), with an optional "@REVISION" after the repo.
func ParseHubRef(s string) (HubRef, error) {
	rest := strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	var ok bool
	for _, p := range []string{"hf.co/", "huggingface.co/", "www.huggingface.co/"} {
		if r, found := strings.CutPrefix(rest, p); found {
			rest, ok = r, true
			break
		}
	}
	if !ok {
		return HubRef{}, fmt.Errorf("model %q: want hf.co/OWNER/REPO[:QUANT], hf.co/OWNER/REPO/FILE.gguf or a short name", s)
	}
	var ref HubRef
	if head, quant, found := strings.Cut(rest, ":"); found {
		rest, ref.Quant = head, quant
		if !quantRE.MatchString(quant) {
			return HubRef{}, fmt.Errorf("model %q: quant %q: want letters, digits and _ (e.g. Q4_K_M)", s, quant)
		}
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return HubRef{}, fmt.Errorf("model %q: want hf.co/OWNER/REPO", s)
	}
	name, rev, _ := strings.Cut(parts[1], "@")
	if !repoPart.MatchString(parts[0]) || !repoPart.MatchString(name) || strings.Contains(name, "..") {
		return HubRef{}, fmt.Errorf("model %q: %q is not a repo name", s, parts[0]+"/"+name)
	}
	ref.Repo, ref.Revision = parts[0]+"/"+name, rev
	if rev != "" && !repoPart.MatchString(rev) {
		return HubRef{}, fmt.Errorf("model %q: revision %q is not a branch, tag or commit", s, rev)
	}
	if len(parts) == 3 && parts[2] != "" {
		ref.File = parts[2]
		if ref.Quant != "" {
			return HubRef{}, fmt.Errorf("model %q: give a file or a quant, not both", s)
		}
		if !strings.HasSuffix(strings.ToLower(ref.File), ".gguf") || strings.Contains(ref.File, "..") || strings.HasPrefix(ref.File, "/") {
			return HubRef{}, fmt.Errorf("model %q: file %q: want a .gguf path in the repo", s, ref.File)
		}
	}
	return ref, nil
}

func (h *Hub) endpoint() string {
	if h.Endpoint == "" {
		return DefaultHubEndpoint
	}
	return strings.TrimSuffix(h.Endpoint, "/")
}

func (h *Hub) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		ResponseHeaderTimeout: 60 * time.Second, TLSHandshakeTimeout: 20 * time.Second, IdleConnTimeout: 90 * time.Second}}
}

func (h *Hub) rev(r HubRef) string {
	if r.Revision == "" {
		return "main"
	}
	return r.Revision
}

// get sends a GET with the token (to the hub; Go's client drops it when a
// redirect leaves the hub's host, as Hugging Face's clients do).
func (h *Hub) get(ctx context.Context, u string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	req.Header.Set("User-Agent", "llmswarm")
	return h.client().Do(req)
}

// statusError turns a hub answer that is not a success into an error that
// says what to do.
func (h *Hub) statusError(resp *http.Response, what string) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	detail := strings.TrimSpace(string(msg))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(msg, &e) == nil && e.Error != "" {
		detail = e.Error
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		if h.Token == "" {
			return fmt.Errorf("%s: %w (HTTP %d: %s): the repo is gated, private or does not exist; set HF_TOKEN to a token that may read it", what, ErrHubAuth, resp.StatusCode, detail)
		}
		return fmt.Errorf("%s: %w (HTTP %d: %s): the token in HF_TOKEN may not read this repo (gated: accept its terms on the hub first)", what, ErrHubAuth, resp.StatusCode, detail)
	case http.StatusNotFound:
		return fmt.Errorf("%s: %w (HTTP 404: %s)", what, ErrHubNotFound, detail)
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, detail)
}

// maxTreeBody bounds one page of a repo's file list.
const maxTreeBody = 16 << 20

// Files lists every file of a repo at a revision, following the hub's
// pagination (Link: rel="next").
func (h *Hub) Files(ctx context.Context, r HubRef) ([]HubFile, error) {
	u := fmt.Sprintf("%s/api/models/%s/tree/%s?recursive=true", h.endpoint(), r.Repo, url.PathEscape(h.rev(r)))
	var out []HubFile
	for page := 0; u != ""; page++ {
		if page > 100 {
			return nil, fmt.Errorf("hub %s: more than 100 pages of files", r.Repo)
		}
		resp, err := h.get(ctx, u, nil)
		if err != nil {
			return nil, fmt.Errorf("hub %s: listing files: %w", r.Repo, err)
		}
		if resp.StatusCode != http.StatusOK {
			err := h.statusError(resp, "hub "+r.Repo)
			resp.Body.Close()
			return nil, err
		}
		var entries []struct {
			Type string `json:"type"`
			Path string `json:"path"`
			Size int64  `json:"size"`
			LFS  *struct {
				OID  string `json:"oid"`
				Size int64  `json:"size"`
			} `json:"lfs"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxTreeBody)).Decode(&entries)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("hub %s: file list is not the hub's JSON: %w", r.Repo, err)
		}
		for _, e := range entries {
			if e.Type != "file" || !SafeRepoPath(e.Path) {
				continue // a path that would leave the repo's directory here is not listed
			}
			f := HubFile{Path: e.Path, Size: e.Size}
			if e.LFS != nil {
				f.SHA256, f.Size = strings.ToLower(e.LFS.OID), e.LFS.Size
			}
			out = append(out, f)
		}
		u = nextLink(resp.Header.Get("Link"))
	}
	return out, nil
}

// SafeRepoPath reports whether p, a path a hub lists, stays inside the
// directory a pull stores the repo in: relative, no "." or ".." part, no
// backslash or NUL, at most 255 bytes a part.
func SafeRepoPath(p string) bool {
	if p == "" || len(p) > 1024 || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || len(part) > 255 {
			return false
		}
	}
	return true
}

// nextLink is the rel="next" URL of a Link header, or "".
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		target, params, ok := strings.Cut(part, ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(target), "<>")
		}
	}
	return ""
}

// GGUFs are the .gguf files among files, split models' parts excluded
// (a file named *-00001-of-00003.gguf needs its siblings; the engine reads
// one file).
func GGUFs(files []HubFile) []HubFile {
	var out []HubFile
	for _, f := range files {
		if strings.HasSuffix(strings.ToLower(f.Path), ".gguf") && !splitPart.MatchString(f.Path) {
			out = append(out, f)
		}
	}
	return out
}

var splitPart = regexp.MustCompile(`(?i)-\d{5}-of-\d{5}\.gguf$`)

// QuantOf is the quantization a GGUF file's name carries ("Q4_K_M",
// "Q8_0", "F16"...), upper case, or "".
func QuantOf(name string) string {
	base := strings.ToUpper(name[strings.LastIndex(name, "/")+1:])
	base = strings.TrimSuffix(base, ".GGUF")
	if m := quantName.FindString(base); m != "" {
		return strings.Trim(m, "-._")
	}
	return ""
}

var quantName = regexp.MustCompile(`[-._](I?Q[1-8](_[0-9A-Z]+)*|F16|BF16|F32)$`)

// PickFile chooses r's file among a repo's files: r.File exactly, else the
// GGUF whose quant is r.Quant (case-insensitive), else the only GGUF.
// Errors list what the repo has.
func PickFile(files []HubFile, r HubRef) (HubFile, error) {
	ggufs := GGUFs(files)
	var names []string
	for _, f := range ggufs {
		names = append(names, f.Path)
	}
	have := strings.Join(names, ", ")
	if len(ggufs) == 0 {
		return HubFile{}, fmt.Errorf("hub %s: %w: the repo has no single-file .gguf", r.Repo, ErrHubNotFound)
	}
	if r.File != "" {
		for _, f := range files {
			if f.Path == r.File {
				return f, nil
			}
		}
		return HubFile{}, fmt.Errorf("hub %s: %w: no file %q (GGUFs: %s)", r.Repo, ErrHubNotFound, r.File, have)
	}
	if r.Quant == "" {
		if len(ggufs) == 1 {
			return ggufs[0], nil
		}
		return HubFile{}, fmt.Errorf("hub %s: %w: %d GGUFs; name one with :QUANT (%s)", r.Repo, ErrHubAmbiguous, len(ggufs), quantList(ggufs))
	}
	var match []HubFile
	for _, f := range ggufs {
		if strings.EqualFold(QuantOf(f.Path), r.Quant) {
			match = append(match, f)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return HubFile{}, fmt.Errorf("hub %s: %w: no %s GGUF (quants: %s)", r.Repo, ErrHubNotFound, strings.ToUpper(r.Quant), quantList(ggufs))
	}
	var paths []string
	for _, f := range match {
		paths = append(paths, f.Path)
	}
	return HubFile{}, fmt.Errorf("hub %s: %w: %d %s GGUFs (%s): name the file: hf.co/%s/FILE.gguf",
		r.Repo, ErrHubAmbiguous, len(match), strings.ToUpper(r.Quant), strings.Join(paths, ", "), r.Repo)
}

func quantList(fs []HubFile) string {
	seen := map[string]bool{}
	var qs []string
	for _, f := range fs {
		q := QuantOf(f.Path)
		if q == "" {
			q = f.Path
		}
		if !seen[q] {
			seen[q] = true
			qs = append(qs, q)
		}
	}
	return strings.Join(qs, ", ")
}
