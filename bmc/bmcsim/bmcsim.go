// Package bmcsim runs the real BMC firmware under simavr for tests: Build
// compiles the firmware (avr-gcc against Debian's Arduino core) and the simbmc
// harness once per content hash into a cache directory, and Start runs an
// emulated board whose UART0 is a pty reachable through a symlink, in real
// time, with an EEPROM file that survives kills and restarts.
//
// It needs gcc-avr, avr-libc, arduino-core-avr, simavr and libsimavr-dev
// (scripts/install-deps.sh); without them Build fails with ErrToolsMissing.
// It must not import the bmc package or anything else of the project.
package bmcsim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmswarm/llmswarm/bmc/firmware"
	"github.com/llmswarm/llmswarm/bmc/harness"
)

// ErrToolsMissing means the AVR toolchain, the Arduino core or simavr is not
// installed.
var ErrToolsMissing = errors.New("bmcsim: AVR toolchain or simavr missing: run scripts/install-deps.sh " +
	"(apt: gcc-avr avr-libc arduino-core-avr simavr libsimavr-dev)")

const (
	arduinoCore = "/usr/share/arduino/hardware/arduino/avr"
	simavrInc   = "/usr/include/simavr"
	cacheFormat = "bmcsim-1"
)

var (
	buildMu                sync.Mutex
	builtELF, builtHarness string
)

func checkTools() error {
	var missing []string
	for _, t := range []string{"avr-gcc", "avr-g++", "avr-gcc-ar", "avr-objcopy", "avr-size", "gcc", "sh"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	for _, p := range []string{arduinoCore + "/cores/arduino/Arduino.h", simavrInc + "/parts/uart_pty.h"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w; not found: %s", ErrToolsMissing, strings.Join(missing, ", "))
	}
	return nil
}

// Build compiles the firmware and the harness, or finds them in the cache
// ($XDG_CACHE_HOME/llmswarm-bmc/<hash>, else under os.TempDir()), and returns
// their paths. Safe for concurrent use, also across processes.
func Build(ctx context.Context) (elf, harnessBin string, err error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtELF != "" {
		return builtELF, builtHarness, nil
	}
	if err := checkTools(); err != nil {
		return "", "", err
	}
	key, err := cacheKey(ctx)
	if err != nil {
		return "", "", err
	}
	root, err := os.UserCacheDir()
	if err != nil || os.MkdirAll(filepath.Join(root, "llmswarm-bmc"), 0o755) != nil {
		root = os.TempDir()
	}
	root = filepath.Join(root, "llmswarm-bmc")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", fmt.Errorf("bmcsim: %w", err)
	}
	dir := filepath.Join(root, key)
	elf = filepath.Join(dir, firmware.Sketch+".elf")
	harnessBin = filepath.Join(dir, "simbmc")
	if fileExists(elf) && fileExists(harnessBin) {
		builtELF, builtHarness = elf, harnessBin
		return elf, harnessBin, nil
	}
	tmp, err := os.MkdirTemp(root, "tmp-")
	if err != nil {
		return "", "", fmt.Errorf("bmcsim: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out")
	if err := buildInto(ctx, tmp, out); err != nil {
		return "", "", err
	}
	// Publish atomically; a concurrent builder may have won the race.
	if err := os.Rename(out, dir); err != nil && !(fileExists(elf) && fileExists(harnessBin)) {
		return "", "", fmt.Errorf("bmcsim: publish build: %w", err)
	}
	builtELF, builtHarness = elf, harnessBin
	return elf, harnessBin, nil
}

func buildInto(ctx context.Context, tmp, out string) error {
	src := filepath.Join(tmp, "src")
	err := fs.WalkDir(firmware.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := firmware.Files.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("bmcsim: unpack firmware: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("bmcsim: %w", err)
	}
	if err := run(ctx, "sh", filepath.Join(src, "build.sh"), filepath.Join(src, firmware.Sketch), filepath.Join(tmp, "fw")); err != nil {
		return fmt.Errorf("bmcsim: build firmware: %w", err)
	}
	for _, ext := range []string{".elf", ".hex"} {
		b, err := os.ReadFile(filepath.Join(tmp, "fw", firmware.Sketch+ext))
		if err != nil {
			return fmt.Errorf("bmcsim: %w", err)
		}
		if err := os.WriteFile(filepath.Join(out, firmware.Sketch+ext), b, 0o644); err != nil {
			return fmt.Errorf("bmcsim: %w", err)
		}
	}
	csrc := filepath.Join(tmp, "simbmc.c")
	if err := os.WriteFile(csrc, harness.Source, 0o644); err != nil {
		return fmt.Errorf("bmcsim: %w", err)
	}
	err = run(ctx, "gcc", "-O2", "-Wall", "-o", filepath.Join(out, "simbmc"), csrc,
		"-I"+simavrInc, "-I"+simavrInc+"/parts", "-lsimavrparts", "-lsimavr", "-lpthread", "-lutil")
	if err != nil {
		return fmt.Errorf("bmcsim: build harness: %w", err)
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, out.Bytes())
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// cacheKey hashes everything the build output depends on.
func cacheKey(ctx context.Context) (string, error) {
	h := sha256.New()
	io.WriteString(h, cacheFormat+"\n")
	err := fs.WalkDir(firmware.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := firmware.Files.ReadFile(p)
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("bmcsim: %w", err)
	}
	fmt.Fprintf(h, "simbmc.c %d\n", len(harness.Source))
	h.Write(harness.Source)
	for _, tool := range []string{"avr-gcc", "gcc"} {
		v, err := exec.CommandContext(ctx, tool, "--version").Output()
		if err != nil {
			return "", fmt.Errorf("bmcsim: %s --version: %w", tool, err)
		}
		h.Write(v)
	}
	if b, err := os.ReadFile(arduinoCore + "/platform.txt"); err == nil {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// Size is the firmware's memory use as avr-size reports it.
type Size struct {
	Flash int // .text + .data bytes of the 32768
	RAM   int // .data + .bss bytes of the 2048 (static; the stack comes on top)
}

// MeasureSize runs avr-size on an ELF.
func MeasureSize(ctx context.Context, elf string) (Size, error) {
	out, err := exec.CommandContext(ctx, "avr-size", "-A", elf).Output()
	if err != nil {
		return Size{}, fmt.Errorf("bmcsim: avr-size: %w", err)
	}
	sec := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				sec[f[0]] = n
			}
		}
	}
	if _, ok := sec[".text"]; !ok {
		return Size{}, fmt.Errorf("bmcsim: avr-size: no .text in %q", out)
	}
	return Size{Flash: sec[".text"] + sec[".data"], RAM: sec[".data"] + sec[".bss"]}, nil
}

// Board is one emulated board. Its pty symlink and EEPROM file live in the
// directory given to Start and are reused by Restart.
type Board struct {
	elf, harness string
	link, eeprom string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *tailBuffer
	closed bool
}

// Start builds (or reuses) the firmware and harness and boots a board with
// its pty link at dir/bmc.pty and its EEPROM at dir/bmc.eeprom.
func Start(ctx context.Context, dir string) (*Board, error) {
	elf, hb, err := Build(ctx)
	if err != nil {
		return nil, err
	}
	b := &Board{
		elf:     elf,
		harness: hb,
		link:    filepath.Join(dir, "bmc.pty"),
		eeprom:  filepath.Join(dir, "bmc.eeprom"),
		log:     &tailBuffer{max: 16 << 10},
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Path is the serial device path (a symlink to the pty) to open.
func (b *Board) Path() string { return b.link }

// EEPROMPath is the file holding the board's EEPROM (boot counter, key).
func (b *Board) EEPROMPath() string { return b.eeprom }

// Log returns the tail of the harness's stderr, for test failure messages.
func (b *Board) Log() string { return b.log.String() }

// Running reports whether the emulator process is alive.
func (b *Board) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

func (b *Board) start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("bmcsim: board closed")
	}
	os.Remove(b.link)
	cmd := exec.Command(b.harness, "-l", b.link, "-e", b.eeprom, b.elf)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("bmcsim: %w", err)
	}
	cmd.Stderr = b.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bmcsim: start harness: %w", err)
	}
	exited := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "PTY ") {
				signalled = true
				close(ready)
			}
		}
	}()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	b.cmd, b.exited = cmd, exited
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("bmcsim: harness exited before its pty was up: %s", b.log.String())
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("bmcsim: waiting for the harness: %w", ctx.Err())
	}
}

// stop signals the emulator and waits for it to exit.
func (b *Board) stop(sig syscall.Signal) error {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
	default:
		if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("bmcsim: signal harness: %w", err)
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	// A SIGKILLed harness leaves its link behind, pointing at a pty number
	// the kernel may hand to someone else.
	os.Remove(b.link)
	return nil
}

// Kill ends the emulator abruptly (SIGKILL), like pulling the USB cable:
// the host sees EIO. The EEPROM file keeps what the board wrote.
func (b *Board) Kill() error { return b.stop(syscall.SIGKILL) }

// Restart kills the emulator if it runs and boots it again on the same link
// and EEPROM: the boot id increments, the tables start empty.
func (b *Board) Restart(ctx context.Context) error {
	if err := b.Kill(); err != nil {
		return err
	}
	return b.start(ctx)
}

// Close stops the emulator (SIGTERM). It is idempotent.
func (b *Board) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.stop(syscall.SIGTERM)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
