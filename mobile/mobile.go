package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/internal/version"
	"github.com/llmswarm/llmswarm/node"
)

// errStopped is what a Node's methods return after Stop, and on a Node
// that Start did not make (gobind gives every bound struct a public
// constructor: `new Node()` in Java is such a Node).
var errStopped = errors.New("mobile: node is not running (stopped, or not made by Start)")

// Node is a running peer, made by Start. Its methods are safe to call from
// any thread.
type Node struct {
	n      *node.Node
	log    *lineLog // nil: no logger
	ctx    context.Context
	cancel context.CancelFunc // ends every request; Stop calls it

	joinMu   sync.Mutex // one Join at a time
	mu       sync.Mutex // guards n, which a Join replaces, and the fields below
	stopped  bool
	stopDone chan struct{}  // closed once Stop has stopped the peer
	stopErr  error          // Stop's, once stopDone is closed
	reqs     sync.WaitGroup // queries running
}

// Start starts a peer. configJSON is swarmd's config file format
// (docs/config.md; "" or "{}" for every default); unknown keys are errors.
// dataDir, when not "", replaces the config's data_dir: pass the app's
// private files directory (Android Context.getFilesDir(), iOS Application
// Support); one of the two is required, since a phone has no home
// directory to default to. logger, when not nil, receives the peer's log
// lines.
//
// Defaults differ from swarmd's in two keys, for a phone: the local HTTP
// API is off unless "api" is set (any app on the device could reach a
// loopback port; the app has this facade instead), and dht_mode is "auto"
// (the peer serves the DHT only once AutoNAT finds it reachable, not from
// behind a carrier's NAT).
func Start(configJSON, dataDir string, logger Logger) (*Node, error) {
	cfg, err := phoneConfig(configJSON, dataDir)
	if err != nil {
		return nil, err
	}
	m := &Node{}
	if logger != nil {
		m.log = newLineLog(logger)
	}
	m.n = &node.Node{Config: cfg, Logger: m.log.slogger()}
	m.n.API = api.New(m.n, m.n.Logger)
	if err := m.n.Start(context.Background()); err != nil {
		m.n.Close()
		m.log.close()
		return nil, fmt.Errorf("mobile: start: %w", err)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// phoneConfig reads the app's config with the phone's defaults.
func phoneConfig(configJSON, dataDir string) (node.Config, error) {
	var cfg node.Config
	if strings.TrimSpace(configJSON) != "" {
		var err error
		if cfg, err = node.ParseConfig([]byte(configJSON)); err != nil {
			return node.Config{}, fmt.Errorf("mobile: config: %w", err)
		}
	}
	if dataDir != "" {
		cfg.DataDir = dataDir
	}
	if cfg.DataDir == "" {
		return node.Config{}, errors.New("mobile: no data dir: pass the app's files directory (or set data_dir)")
	}
	if cfg.API == "" {
		cfg.API = "off"
	}
	if cfg.DHTMode == "" {
		cfg.DHTMode = "auto"
	}
	if err := cfg.Validate(); err != nil {
		return node.Config{}, fmt.Errorf("mobile: %w", err)
	}
	return cfg, nil
}

// Stop stops the peer: requests still running end with OnError
// ("cancelled"), then the peer leaves the swarm. It is idempotent: a call
// while another is stopping the peer returns once it has (with its
// error), so a new Start on the same data dir finds it free. It does not
// wait for handlers to return, so a handler may call it.
func (m *Node) Stop() error {
	m.mu.Lock()
	if m.n == nil {
		m.mu.Unlock()
		return nil
	}
	if m.stopped {
		done := m.stopDone
		m.mu.Unlock()
		<-done
		return m.stopErr
	}
	m.stopped = true
	m.stopDone = make(chan struct{})
	m.mu.Unlock()
	m.cancel()
	m.reqs.Wait()
	m.mu.Lock()
	n := m.n
	m.mu.Unlock()
	err := n.Close()
	m.log.close()
	m.stopErr = err
	close(m.stopDone)
	return err
}

// Identity is this peer's identity as JSON, as GET /v1/swarm/id answers:
// {"peer_id", "addrs", "version", "platform", "private"}. (Not "ID":
// gobind turns a method named id into id_ in Objective-C.)
func (m *Node) Identity() (string, error) {
	n := m.node()
	if n == nil {
		return "", errStopped
	}
	v, err := n.ID()
	return encode(v, err)
}

// Status is this peer's state as JSON, as GET /v1/swarm/status answers
// (peers known and alive, connections, NAT, power with taking_work, ...).
func (m *Node) Status() (string, error) {
	n := m.node()
	if n == nil {
		return "", errStopped
	}
	v, err := n.Status()
	return encode(v, err)
}

// Peers lists the peers this one knows, itself included, as JSON, as GET
// /v1/swarm/peers answers: {"peers": [{"peer_id", "alive", "roles", ...}]}.
func (m *Node) Peers() (string, error) {
	n := m.node()
	if n == nil {
		return "", errStopped
	}
	v, err := n.Peers()
	return encode(v, err)
}

// APIAddr is the address the local HTTP API listens on, "off" when it
// does not (the default on a phone).
func (m *Node) APIAddr() string {
	n := m.node()
	if n == nil {
		return "off"
	}
	return n.APIAddr()
}

// ReportPower tells the peer the device's power state: batteryPercent
// 0..100 (-1: no battery), charging, and thermal "nominal", "fair",
// "serious", "critical" or "" (unknown). The capability record carries it
// from the next heartbeat on; at or below power.min_battery (default 20)
// and not charging, or at power.pause_thermal (default serious) or hotter,
// the peer takes no new work from other peers until a report says
// otherwise, and Status says why. Call it at start and on every change
// (Android's ACTION_BATTERY_CHANGED and thermal status listener, iOS's
// battery and thermal state notifications).
func (m *Node) ReportPower(batteryPercent int, charging bool, thermal string) error {
	n := m.node()
	if n == nil {
		return errStopped
	}
	return n.ReportPower(node.Power{BatteryPercent: batteryPercent, Charging: charging, Thermal: thermal})
}

// node is the running peer: nil after Stop, and on a Node Start did not
// make. A Join that changed the swarm key replaces it.
func (m *Node) node() *node.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	return m.n
}

func encode(v any, err error) (string, error) {
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("mobile: encoding: %w", err)
	}
	return string(b), nil
}

// Version is the build of the peer: release, then the module version or
// VCS revision it was built from, as swarmd --version prints it.
func Version() string { return version.String() }

// isStopped is true after Stop, and on a Node Start did not make.
func (m *Node) isStopped() bool { return m.node() == nil }
