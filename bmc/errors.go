package bmc

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every method of a closed Bridge.
	ErrClosed = errors.New("bmc: bridge closed")
	// ErrDisconnected means the serial device is gone (unplugged, emulator
	// killed); the bridge is reconnecting in the background.
	ErrDisconnected = errors.New("bmc: device disconnected")
	// ErrTimeout means the board did not answer within Options.Timeout.
	ErrTimeout = errors.New("bmc: request timed out")
	// ErrRebooted means the board reset while a request was in flight.
	ErrRebooted = errors.New("bmc: board rebooted during request")
	// ErrBadMAC means a table dump does not carry a valid MAC for the key
	// and nonce: tampered, replayed, or signed with another key.
	ErrBadMAC = errors.New("bmc: table MAC mismatch")
	// ErrMalformed means a line or table does not follow the protocol.
	ErrMalformed = errors.New("bmc: malformed line")
	// ErrTooLong means a request would not fit the board's receive buffer.
	ErrTooLong = errors.New("bmc: request line too long")
	// ErrNoHostKey means Bridge.Table was called without Options.Key.
	ErrNoHostKey = errors.New("bmc: no key configured to verify tables")

	// Board refusals; a *DeviceError matches these with errors.Is.
	ErrNoKey       = errors.New("bmc: board has no key provisioned")
	ErrProvisioned = errors.New("bmc: board key already provisioned")
	ErrFull        = errors.New("bmc: board table full")
	ErrNotFound    = errors.New("bmc: no such entry on the board")
	ErrRejected    = errors.New("bmc: board rejected the request")
)

// DeviceError is an "ERR <code>" reply from the board to a request.
type DeviceError struct {
	Cmd  string // the request's command word, e.g. "HB"
	Code string // the board's error code, e.g. "full"
}

func (e *DeviceError) Error() string {
	return fmt.Sprintf("bmc: board refused %s: %s", e.Cmd, e.Code)
}

// Is maps board error codes onto the package's sentinel errors. Every
// DeviceError also matches ErrRejected.
func (e *DeviceError) Is(target error) bool {
	switch target {
	case ErrRejected:
		return true
	case ErrNoKey:
		return e.Code == "nokey"
	case ErrProvisioned:
		return e.Code == "provisioned"
	case ErrFull:
		return e.Code == "full"
	case ErrNotFound:
		return e.Code == "notfound"
	case ErrTooLong:
		return e.Code == "toolong"
	}
	return false
}

// ParseError describes a line the host could not parse. It matches
// ErrMalformed.
type ParseError struct {
	Line   string
	Reason string
}

func (e *ParseError) Error() string {
	l := e.Line
	if len(l) > 80 {
		l = l[:80] + "..."
	}
	return fmt.Sprintf("bmc: malformed line %q: %s", l, e.Reason)
}

func (e *ParseError) Unwrap() error { return ErrMalformed }

func malformed(line, format string, args ...any) error {
	return &ParseError{Line: line, Reason: fmt.Sprintf(format, args...)}
}
