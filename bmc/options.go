package bmc

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configure a Bridge. The zero value is valid: 115200 baud, 1 s
// per request, reconnect backoff from 100 ms to 5 s, no key (Table fails
// with ErrNoHostKey), DTR left alone, board config left alone.
type Options struct {
	// Baud defaults to 115200, what the firmware uses.
	Baud int
	// Key is the 32-byte HMAC key provisioned into the board; Table needs it.
	Key []byte
	// Timeout bounds one request (a TAB gets 3x). Default 1 s.
	Timeout time.Duration
	// BootWait bounds the handshake after opening the port: a real Uno
	// resets when the port opens and sits ~1.6 s in its bootloader.
	// Default 3 s.
	BootWait time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay, which doubles
	// after every failed attempt. Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// ResetOnConnect pulses DTR after opening the port, which resets a real
	// Uno so every connection starts from a known boot. Ports that cannot
	// set DTR (a pty) log a warning and carry on.
	ResetOnConnect bool
	// Config, when Period is set, is sent to the board on every connect,
	// since the board forgets it at reset.
	Config Config
	// Logger receives connection events and skipped line noise; nil
	// discards.
	Logger *slog.Logger
	// EventBuffer is the capacity of the Events channel (default 16).
	// Events that do not fit are dropped, never blocking the bridge.
	EventBuffer int
}

func (o Options) withDefaults() (Options, error) {
	if o.Baud == 0 {
		o.Baud = 115200
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.BootWait <= 0 {
		o.BootWait = 3 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = 16
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Key != nil && len(o.Key) != KeySize {
		return o, fmt.Errorf("%w: key is %d bytes, want %d", ErrMalformed, len(o.Key), KeySize)
	}
	if o.Config.Period != 0 {
		if _, err := EncodeConfig(o.Config); err != nil {
			return o, err
		}
	}
	return o, nil
}

// EventKind says what happened to the board connection.
type EventKind int

const (
	// EventConnected: the port is open and the board answered; Boot is set.
	EventConnected EventKind = iota + 1
	// EventDisconnected: the device went away; Err says how. The bridge
	// is reconnecting.
	EventDisconnected
	// EventRebooted: the board announced a fresh boot (READY) while
	// connected, e.g. after a DTR or watchdog reset. Its tables are empty.
	EventRebooted
)

func (k EventKind) String() string {
	switch k {
	case EventConnected:
		return "connected"
	case EventDisconnected:
		return "disconnected"
	case EventRebooted:
		return "rebooted"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event reports a change of the board connection.
type Event struct {
	Kind EventKind
	Time time.Time
	Boot uint32 // board boot id, when known
	Err  error  // cause of a disconnect
}
