package shards

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Download fetches f of r into dst, and reports the bytes it holds as they
// arrive (progress may be nil). The bytes go to dst+".partial" first: an
// interrupted download resumes from there with a Range request, within a
// call and across calls. A file with a published sha256 is checked
// against it before it is renamed into place; one that does not match is
// removed (ErrHubHash).
func (h *Hub) Download(ctx context.Context, r HubRef, f HubFile, dst string, progress func(done, total int64)) error {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	part := dst + ".partial"
	attempts := h.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	var err error
	for try := range attempts {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(1<<min(try-1, 4)) * time.Second):
			}
		}
		var retry bool
		retry, err = h.attempt(ctx, r, f, part, progress)
		if err == nil || !retry || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("hub %s: downloading %s: %w (the partial file is kept: pull again to resume)", r.Repo, f.Path, ctx.Err())
		}
		return err
	}
	if err := checkDownload(part, f); err != nil {
		os.Remove(part)
		return fmt.Errorf("hub %s: %s: %w", r.Repo, f.Path, err)
	}
	return os.Rename(part, dst)
}

// attempt is one GET of the file, resuming after what part holds. retry
// says whether another attempt may get further.
func (h *Hub) attempt(ctx context.Context, r HubRef, f HubFile, part string, progress func(done, total int64)) (retry bool, err error) {
	out, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return false, err
	}
	defer out.Close()
	have, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	if f.Size > 0 && have == f.Size {
		progress(have, f.Size)
		return false, nil // whole: the check decides
	}
	if f.Size > 0 && have > f.Size {
		if err := out.Truncate(0); err != nil {
			return false, err
		}
		have, _ = out.Seek(0, io.SeekStart)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	header := http.Header{}
	if have > 0 {
		header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", h.endpoint(), r.Repo, url.PathEscape(h.rev(r)), escapePath(f.Path))
	resp, err := h.get(ctx, u, header)
	if err != nil {
		return true, fmt.Errorf("hub %s: downloading %s: %w", r.Repo, f.Path, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
			return true, fmt.Errorf("hub %s: %s: asked for bytes from %d, got Content-Range %q", r.Repo, f.Path, have, resp.Header.Get("Content-Range"))
		}
	case http.StatusOK: // no Range, or a server that ignores it: from the start
		if err := out.Truncate(0); err != nil {
			return false, err
		}
		if have, err = out.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if err := out.Truncate(0); err != nil { // bigger than the file: start over
			return false, err
		}
		return true, fmt.Errorf("hub %s: %s: the partial download is larger than the file; starting over", r.Repo, f.Path)
	default:
		err := h.statusError(resp, fmt.Sprintf("hub %s: %s", r.Repo, f.Path))
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, err
	}
	stall := h.Stall
	if stall <= 0 {
		stall = 60 * time.Second
	}
	body := &stallReader{r: resp.Body, timer: time.AfterFunc(stall, func() {
		cancel(fmt.Errorf("no bytes for %s", stall))
	}), every: stall}
	defer body.timer.Stop()
	done := have
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if f.Size > 0 && done+int64(n) > f.Size {
				return false, fmt.Errorf("hub %s: %s: the server sent more than the file's %d bytes", r.Repo, f.Path, f.Size)
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return false, fmt.Errorf("writing %s: %w", part, err)
			}
			done += int64(n)
			progress(done, f.Size)
		}
		if rerr == io.EOF {
			if f.Size > 0 && done < f.Size {
				return true, fmt.Errorf("hub %s: %s: connection ended at byte %d of %d", r.Repo, f.Path, done, f.Size)
			}
			return false, nil
		}
		if rerr != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				rerr = cause
			}
			return true, fmt.Errorf("hub %s: %s: at byte %d of %d: %w", r.Repo, f.Path, done, f.Size, rerr)
		}
	}
}

// stallReader restarts its timer on every read that returns bytes.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	every time.Duration
	mu    sync.Mutex
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.mu.Lock()
		s.timer.Reset(s.every)
		s.mu.Unlock()
	}
	return n, err
}

// rangeStart reads the first byte of "bytes A-B/N".
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// checkDownload compares a downloaded file with the hub's size and sha256.
func checkDownload(path string, f HubFile) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if f.Size > 0 && st.Size() != f.Size {
		return fmt.Errorf("%w: %d bytes, the hub says %d", ErrHubHash, st.Size(), f.Size)
	}
	if f.SHA256 == "" {
		return nil
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	if sum != f.SHA256 {
		return fmt.Errorf("%w: sha256 %s, the hub publishes %s", ErrHubHash, sum, f.SHA256)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	var h hash.Hash = sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HaveDownload reports whether path already holds f: the size the hub
// lists and, where it publishes one, the sha256 recorded beside the file
// when it was checked (path+".sha256"), as long as the file is unchanged
// since.
func HaveDownload(path string, f HubFile) bool {
	st, err := os.Stat(path)
	if err != nil || (f.Size > 0 && st.Size() != f.Size) {
		return false
	}
	if f.SHA256 == "" {
		return true
	}
	b, err := os.ReadFile(path + ".sha256")
	if err != nil {
		return false
	}
	sum, stamp, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	return sum == f.SHA256 && stamp == strconv.FormatInt(st.ModTime().UnixNano(), 10)
}

// RecordDownload writes the sidecar HaveDownload reads.
func RecordDownload(path string, f HubFile) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path+".sha256", []byte(f.SHA256+" "+strconv.FormatInt(st.ModTime().UnixNano(), 10)+"\n"), 0o644)
}
