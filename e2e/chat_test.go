package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the master for the test, the slave for
// the program under test.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pty: %v", err)
	}
	var n int
	rc, err := m.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
				n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
			}
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		m.Close()
		t.Fatalf("unlocking the pty: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("opening the pty's terminal: %v", err)
	}
	return m, s
}

// ptyCtl is swarmctl running on a terminal, as a person would run it.
type ptyCtl struct {
	t      *testing.T
	master *os.File
	out    *syncBuffer // everything written to the terminal, echo included
	mark   int         // expect looks past this offset
	cmd    *exec.Cmd
	exited chan struct{}
}

func startPtyCtl(t *testing.T, args ...string) *ptyCtl {
	t.Helper()
	master, slave := openPTY(t)
	p := &ptyCtl{t: t, master: master, out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bin, "swarmctl"), args...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	// A session of its own with the pty as its controlling terminal, so
	// that ^C on the terminal is a SIGINT to swarmctl.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	go func() { io.Copy(p.out, master) }() // ends with EIO once swarmctl is gone
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		master.Close()
	})
	return p
}

// send types a line (or a control character) on the terminal.
func (p *ptyCtl) send(s string) {
	p.t.Helper()
	if _, err := p.master.WriteString(s); err != nil {
		p.t.Fatalf("typing %q: %v", s, err)
	}
}

// expect waits for re to match the terminal's output past the last match,
// and returns the submatches.
func (p *ptyCtl) expect(re string, within time.Duration) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []int
	var out string
	deadline := time.Now().Add(within)
	for {
		out = p.out.String()
		if m = rx.FindStringSubmatchIndex(out[p.mark:]); m != nil {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q on the terminal within %s; it shows:\n%s", re, within, tail(out, 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var subs []string
	for i := 0; i < len(m); i += 2 {
		subs = append(subs, "")
		if m[i] >= 0 {
			subs[i/2] = out[p.mark+m[i] : p.mark+m[i+1]]
		}
	}
	p.mark += m[1]
	return subs
}

// exitCode waits for swarmctl to end.
func (p *ptyCtl) exitCode(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("swarmctl chat did not exit within %s; the terminal shows:\n%s", within, tail(p.out.String(), 40))
		return -1
	}
}

var footerRE = `— (\S+): (\d+) messages? sent, (\d+) prompt \+ (\d+) generated tokens`

// turn asks a question and returns the traced summary's message count
// (the query's history and the question), prompt tokens and generated
// tokens (the chat runs with /trace on).
func (p *ptyCtl) turn(mode, question string) (msgs, prompt, generated int) {
	p.t.Helper()
	p.send(question + "\r")
	m := p.expect(footerRE, 60*time.Second)
	if m[1] != mode {
		p.t.Fatalf("asked in mode %q, want %q", m[1], mode)
	}
	if n, _ := strconv.Atoi(m[2]); (n == 1) == strings.Contains(m[0], " messages sent") {
		p.t.Fatalf("summary %q: %d message(s), wrongly numbered", m[0], n)
	}
	msgs, _ = strconv.Atoi(m[2])
	prompt, _ = strconv.Atoi(m[3])
	generated, _ = strconv.Atoi(m[4])
	p.expect(`>>> `, 10*time.Second)
	return msgs, prompt, generated
}

// TestChatOnPty drives swarmctl chat through a real terminal against a
// daemon serving three roles: an answer streams; with /trace on, the second
// turn carries the first as the query's history (more messages, more
// prompt tokens) and /reset forgets it; /mode switches strategy (the
// daemon's metrics count the modes it answered in) and a traced MoA turn
// shows the agents as they finish, before the answer streams, as ask
// --trace does; ^C at the prompt does not end the chat; /quit exits 0.
func TestChatOnPty(t *testing.T) {
	d := roleDaemon(t, "", "reasoner", "concise", "aggregator")
	p := startPtyCtl(t, "--api", d.api, "chat", "--mode", "concise", "--max-tokens", "8")
	p.expect(`mode concise: /help for commands`, 10*time.Second)
	p.expect(`>>> `, 5*time.Second)

	const q = "What is the capital of France?"
	p.send(q + "\r")
	p.expect(regexp.QuoteMeta(q)+`\r?\n`, 5*time.Second)
	if a := p.expect(`(?s)(.+?)\r?\n>>> `, 60*time.Second); strings.TrimSpace(a[1]) == "" {
		t.Fatal("the answer is empty")
	}
	p.send("/reset\r")
	p.expect(`\(conversation forgotten\)`, 5*time.Second)

	p.send("/trace on\r")
	p.expect(`\(trace on\)`, 5*time.Second)
	n1, p1, g1 := p.turn("concise", q)
	n2, p2, _ := p.turn("concise", q)
	t.Logf("turn 1: %d message(s), %d prompt tokens, %d generated; turn 2: %d messages, %d prompt tokens", n1, p1, g1, n2, p2)
	if g1 == 0 {
		t.Fatal("the answer has no tokens")
	}
	if n1 != 1 || n2 != 3 || p2 <= p1 {
		t.Fatalf("the second turn does not carry the first: %d then %d messages, %d then %d prompt tokens", n1, n2, p1, p2)
	}
	p.send("/reset\r")
	p.expect(`\(conversation forgotten\)`, 5*time.Second)
	n3, p3, _ := p.turn("concise", q)
	if n3 != 1 || p3 != p1 {
		t.Fatalf("after /reset: %d messages, %d prompt tokens; want 1 and %d", n3, p3, p1)
	}

	p.send("/mode moa\r")
	p.expect(`\(mode moa\)`, 5*time.Second)
	p.send("Name a colour.\r")
	trace := p.expect(`(?s)(agent .*)— moa, .*?`+footerRE, 60*time.Second)
	for _, re := range []string{`agent\s+reasoner\s`, `agent\s+concise\s`, `aggregator\s+aggregator\s`} {
		if !regexp.MustCompile(re).MatchString(trace[1]) {
			t.Fatalf("moa trace lacks %s:\n%s", re, trace[0])
		}
	}
	if trace[2] != "moa" || trace[3] != "3" {
		t.Fatalf("moa turn summary %q: want moa with 3 messages", trace[0])
	}
	// Streamed, not whole: the agents' lines come as they finish, then the
	// aggregator's answer as it is written, then the aggregator's line.
	agentLines := regexp.MustCompile(`agent\s+(reasoner|concise)\s[^\n]*\n`).FindAllStringIndex(trace[1], -1)
	agg := regexp.MustCompile(`aggregator\s+aggregator\s`).FindStringIndex(trace[1])
	if len(agentLines) != 2 || agg == nil || agg[0] < agentLines[1][1] {
		t.Fatalf("moa trace out of order:\n%s", trace[1])
	}
	answer := regexp.MustCompile(`\r|\x1b\[K|agents writing: [^\r\n]*`).ReplaceAllString(trace[1][agentLines[1][1]:agg[0]], "")
	if strings.TrimSpace(answer) == "" {
		t.Fatalf("no answer streamed between the agents' lines and the aggregator's:\n%q", trace[1])
	}
	p.expect(`>>> `, 10*time.Second)
	metrics := httpGet(t, "http://"+d.api+"/metrics")
	for _, want := range []string{`swarm_requests_total{mode="concise",outcome="ok"} 4`, `swarm_requests_total{mode="moa",outcome="ok"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("the daemon's metrics lack %s:\n%s", want, metrics)
		}
	}

	p.send("/mode pipeline\r")
	p.expect(`/mode pipeline: no model's layers are all held by live peers`, 10*time.Second)
	p.send("\x03") // ^C at the prompt: a hint, not the end
	p.expect(`\(Ctrl-D or /quit leaves the chat\)`, 5*time.Second)
	p.send("/quit\r")
	if code := p.exitCode(10 * time.Second); code != 0 {
		t.Fatalf("/quit: exit %d", code)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestChatCtrlCAndEOF: ^C while an answer is being written stops that
// answer, which stays out of the conversation, and the chat goes on; ^D
// ends the chat with exit 0.
func TestChatCtrlCAndEOF(t *testing.T) {
	d := roleDaemon(t, "", "concise")
	p := startPtyCtl(t, "--api", d.api, "chat", "--mode", "concise", "--max-tokens", "8", "--trace")
	p.expect(`>>> `, 10*time.Second)
	p.turn("concise", "Hello?")
	// A daemon that stops mid-answer: the question is on its way and
	// nothing comes back until ^C.
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "swarmd stops", func() bool { return stopped(d.cmd.Process.Pid) })
	p.send("Are you there?\r")
	// The line must reach swarmctl before ^C (the terminal discards
	// unread input on ^C): wait until the question waits, unread, at the
	// stopped daemon (swarmctl may reuse the connection of the first turn).
	for start := time.Now(); unread(t, d.api) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the question did not reach the stopped swarmd within 10s; the terminal shows:\n%s", tail(p.out.String(), 20))
		}
	}
	p.send("\x03")
	p.expect(`\(answer stopped; it is not part of the conversation\)`, 10*time.Second)
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	p.expect(`>>> `, 5*time.Second)
	if n, _, _ := p.turn("concise", "And now?"); n != 3 {
		t.Fatalf("after a stopped answer the next question went with %d messages, want 3 (the stopped turn left out)", n)
	}
	p.send("\x04")
	if code := p.exitCode(10 * time.Second); code != 0 {
		t.Fatalf("^D: exit %d", code)
	}
}

// stopped says whether every thread of a process is stopped (SIGSTOP).
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if f := strings.Fields(string(b[i+1:])); i < 0 || len(f) == 0 || f[0] != "T" && f[0] != "t" {
			return false
		}
	}
	return true
}

// unread is how many bytes wait, unread, in the established TCP
// connections that addr (host:port, IPv4) accepted: a stopped daemon's
// requests not yet read.
func unread(t *testing.T, addr string) int {
	t.Helper()
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue ...
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != "01" || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
			continue
		}
		if _, rx, ok := strings.Cut(f[4], ":"); ok {
			q, _ := strconv.ParseInt(rx, 16, 64)
			n += int(q)
		}
	}
	return n
}

// TestAskFromStdin: swarmctl ask reads the question from a pipe, with "-"
// and with no argument at all, and answers it.
func TestAskFromStdin(t *testing.T) {
	d := roleDaemon(t, "", "reasoner", "concise", "aggregator")
	for _, args := range [][]string{{"-"}, nil} {
		cmd := exec.Command(filepath.Join(bin, "swarmctl"), append([]string{"--api", d.api, "ask", "--json", "--max-tokens", "4"}, args...)...)
		cmd.Stdin = strings.NewReader("  What is the capital of France?\n")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("ask %q from a pipe: %v\n%s", args, err, ee.Stderr)
		}
		if err != nil || !strings.Contains(string(out), `"query": "What is the capital of France?"`) {
			t.Fatalf("ask %q from a pipe: %v\n%s", args, err, out)
		}
	}
}
