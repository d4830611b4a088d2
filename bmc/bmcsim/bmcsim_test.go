package bmcsim

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.bug.st/serial"
)

func TestBoardLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("emulator test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	elf, hb, err := Build(ctx)
	if errors.Is(err, ErrToolsMissing) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if elf2, hb2, err := Build(ctx); err != nil || elf2 != elf || hb2 != hb {
		t.Fatalf("second Build: %s %s %v", elf2, hb2, err)
	}
	dir := t.TempDir()
	b, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	boot := func() string {
		t.Helper()
		p, err := serial.Open(b.Path(), &serial.Mode{BaudRate: 115200})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if _, err := p.Write([]byte("\nINFO\n")); err != nil {
			t.Fatal(err)
		}
		if err := p.SetReadTimeout(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(p)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 3 && f[0] == "INFO" {
				return f[3]
			}
		}
		t.Fatalf("no INFO reply: %v", sc.Err())
		return ""
	}
	if got := boot(); got != "boot=1" {
		t.Fatalf("first boot: %s", got)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	if b.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := os.Lstat(b.Path()); !os.IsNotExist(err) {
		t.Fatalf("stale pty link after Kill: %v", err)
	}
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := boot(); got != "boot=2" {
		t.Fatalf("boot after restart: %s", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Restart(ctx); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
	if st, err := os.Stat(b.EEPROMPath()); err != nil || st.Size() != 1024 {
		t.Fatalf("EEPROM file: %v %v", st, err)
	}
}
