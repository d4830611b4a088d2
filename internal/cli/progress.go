package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Progress shows how far a job with a known total is: on a terminal one
// line rewritten in place at most ten times a second, with a bar, the rate
// and the time left; otherwise a plain line at each tenth of the way (and
// when the label changes), for logs and pipes.
type Progress struct {
	W   io.Writer
	TTY bool

	last   time.Time
	label  string
	tenth  int64
	shown  bool
	at     []time.Time
	counts []int64
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Show reports done of total (total 0: unknown) under label; bytes says
// the counts are bytes (shown in MiB, with a rate).
func (p *Progress) Show(label string, done, total int64, bytes bool) {
	now := time.Now()
	p.at, p.counts = append(p.at, now), append(p.counts, done)
	for len(p.at) > 2 && now.Sub(p.at[0]) > 5*time.Second {
		p.at, p.counts = p.at[1:], p.counts[1:]
	}
	if !p.TTY {
		tenth := int64(-1)
		if total > 0 {
			tenth = done * 10 / total
		}
		if label != p.label || tenth != p.tenth {
			p.label, p.tenth = label, tenth
			fmt.Fprintln(p.W, p.line(label, done, total, bytes))
		}
		return
	}
	if done < total && now.Sub(p.last) < 100*time.Millisecond && label == p.label {
		return
	}
	p.label, p.last, p.shown = label, now, true
	fmt.Fprintf(p.W, "\r\033[K%s", p.line(label, done, total, bytes))
}

// Done clears the terminal line.
func (p *Progress) Done() {
	if p.TTY && p.shown {
		fmt.Fprint(p.W, "\r\033[K")
		p.shown = false
	}
}

func (p *Progress) line(label string, done, total int64, bytes bool) string {
	var s strings.Builder
	s.WriteString(label)
	count := func(n int64) string {
		if bytes {
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		}
		return fmt.Sprint(n)
	}
	if total <= 0 {
		if done > 0 {
			s.WriteString(" " + count(done))
		}
		return s.String()
	}
	frac := min(float64(done)/float64(total), 1)
	const width = 24
	full := int(frac * width)
	fmt.Fprintf(&s, " %3.0f%% [%s%s] %s/%s", frac*100, strings.Repeat("#", full), strings.Repeat(".", width-full), count(done), count(total))
	if r := p.rate(); r > 0 && done < total {
		eta := time.Duration(float64(total-done) / r * float64(time.Second)).Round(time.Second)
		if bytes {
			fmt.Fprintf(&s, " %.1f MiB/s", r/(1<<20))
		}
		fmt.Fprintf(&s, " ETA %s", eta)
	}
	return s.String()
}

func (p *Progress) rate() float64 {
	if len(p.at) < 2 {
		return 0
	}
	d := p.at[len(p.at)-1].Sub(p.at[0]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(p.counts[len(p.counts)-1]-p.counts[0]) / d
}
