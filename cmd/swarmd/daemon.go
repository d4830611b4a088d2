package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/gologshim"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/internal/cli"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/node"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// daemonFlags are swarmd's flags; each overrides the config file's key of
// the same meaning.
type daemonFlags struct {
	config, data, api, swarmKey, logFormat, logLevel, dhtMode, device string
	listen, bootstrap, roles, shards                                  listFlag
	threads, slots, gpuLayers                                         int
	noMDNS                                                            bool
	heartbeat                                                         time.Duration
	bmcSerial, bmcKey                                                 string
	bmcPeers                                                          listFlag
	bmcDTR                                                            bool
	relays                                                            listFlag
	relayService, reachability                                        string
	maxMemory, gpuLibs                                                string
	join                                                              string
	open                                                              bool
	given                                                             map[string]bool // flags set on the command line
}

// errPrinted is a usage error the flag package has already printed.
var errPrinted = errors.New("usage error")

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usage, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func parseDaemonFlags(args []string, stderr io.Writer) (*daemonFlags, *flag.FlagSet, error) {
	f := &daemonFlags{}
	fs := flag.NewFlagSet("swarmd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // the flag package prints the error itself; -h prints help below
	fs.StringVar(&f.config, "config", "", "JSON config `FILE` (keys: see docs/config.md); flags override it")
	fs.StringVar(&f.data, "data", "", "data `DIR` (default ~/.swarm)")
	fs.Var(&f.listen, "listen", "libp2p listen `MULTIADDR` (repeatable; default TCP+QUIC on port 7434)")
	fs.StringVar(&f.api, "api", "", "local HTTP API `HOST:PORT` (default 127.0.0.1:7433; \"off\" disables)")
	fs.Var(&f.bootstrap, "bootstrap", "bootstrap peer `MULTIADDR` ending in /p2p/ID (repeatable)")
	fs.BoolVar(&f.noMDNS, "no-mdns", false, "turn off LAN discovery by mDNS")
	fs.StringVar(&f.swarmKey, "swarm-key", "", "pre-shared key `FILE` (IPFS swarm.key format) for a private swarm (default DATA/swarm.key, created if missing)")
	fs.StringVar(&f.join, "join", "", "join the swarm of a `TOKEN` from swarmctl invite: its key replaces DATA/swarm.key, its peer is kept as a bootstrap peer")
	fs.BoolVar(&f.open, "open", false, "be a peer of the open swarm: no key; anyone on the LAN, or who dials, sees this peer's models and may send it prompts")
	fs.StringVar(&f.dhtMode, "dht-mode", "", "DHT mode: server, client, auto or off (default server)")
	fs.DurationVar(&f.heartbeat, "heartbeat", 0, "liveness tick: peers in use are probed this often, a changed record goes out at most this often (default 1s)")
	fs.StringVar(&f.device, "device", "", "device name announced to the swarm (e.g. raspberry-pi-4)")
	fs.Var(&f.roles, "role", "serve a Mixture-of-Agents role: `ROLE=PATH.gguf` (repeatable)")
	fs.Var(&f.shards, "shard", "serve layers [A,B) of a model: `PATH.gguf:A-B` or MODEL_CID:A-B (repeatable)")
	fs.IntVar(&f.threads, "threads", 0, "inference threads (default: all cores)")
	fs.IntVar(&f.slots, "slots", 0, "concurrent requests per loaded model (default 4)")
	fs.IntVar(&f.gpuLayers, "gpu-layers", -1, "layers of each model on a GPU: -1 as many as fit, 0 none (default -1)")
	fs.StringVar(&f.gpuLibs, "gpu-libs", "", "load GPU backends from `DIR`, ending in lib/ollama (default: lib/ollama beside the binary's folder)")
	fs.StringVar(&f.bmcSerial, "bmc-serial", "", "be the BMC bridge of the board on serial `PATH` (e.g. /dev/ttyACM0)")
	fs.StringVar(&f.bmcKey, "bmc-key", "", "BMC HMAC key `FILE`, 64 hex chars (default DATA/bmc.key, created if missing)")
	fs.BoolVar(&f.bmcDTR, "bmc-dtr", false, "pulse DTR when opening the BMC port (resets a real Uno)")
	fs.Var(&f.bmcPeers, "bmc-peer", "accept BMC tables from `PEER_ID` (repeatable)")
	fs.Var(&f.relays, "relay", "reserve a slot on relay `MULTIADDR` (ending in /p2p/ID) while not publicly reachable (repeatable)")
	fs.StringVar(&f.relayService, "relay-service", "", "relay for swarm members: auto (while publicly reachable), on or off (default auto)")
	fs.StringVar(&f.maxMemory, "max-memory", "", "memory the served roles and shards may take, e.g. `SIZE` 3GiB (default half the RAM)")
	fs.StringVar(&f.reachability, "reachability", "", "auto (AutoNAT asks peers), public or private (default auto)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.given = map[string]bool{}
	if args == nil {
		return f, fs, nil
	}
	pos, err := cli.Parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, fs, err
		}
		return nil, fs, errPrinted
	}
	if len(pos) > 0 {
		return nil, fs, fmt.Errorf("unexpected argument %q (subcommands: model, bench, version, help)", pos[0])
	}
	f.given = cli.Given(fs)
	return f, fs, nil
}

// buildConfig merges the config file and the flags, and validates the
// result. SWARM_API_TOKEN sets the API token, so it never shows in a
// process listing. Every error is a usage error.
func (f *daemonFlags) buildConfig() (node.Config, error) {
	cfg, err := f.mergeConfig()
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func (f *daemonFlags) mergeConfig() (node.Config, error) {
	var cfg node.Config
	if f.config != "" {
		var err error
		if cfg, err = node.LoadConfig(f.config); err != nil {
			return cfg, err
		}
	}
	switch {
	case f.given["slots"] && (f.slots < 1 || f.slots > 64):
		return cfg, fmt.Errorf("--slots %d: want 1..64 concurrent requests per model", f.slots)
	case f.given["threads"] && f.threads < 1:
		return cfg, fmt.Errorf("--threads %d: want at least 1", f.threads)
	case f.given["gpu-layers"] && (f.gpuLayers < -1 || f.gpuLayers > 4096):
		return cfg, fmt.Errorf("--gpu-layers %d: want -1 (as many as fit), 0 (none) .. 4096", f.gpuLayers)
	case f.given["heartbeat"] && f.heartbeat <= 0:
		return cfg, fmt.Errorf("--heartbeat %s: want a positive duration such as 2s", f.heartbeat)
	}
	if f.data != "" {
		cfg.DataDir = f.data
	}
	if len(f.listen) > 0 {
		cfg.Listen = f.listen
	}
	if f.api != "" {
		cfg.API = f.api
	}
	if len(f.bootstrap) > 0 {
		cfg.Bootstrap = append(cfg.Bootstrap, f.bootstrap...)
	}
	if f.noMDNS {
		cfg.NoMDNS = true
	}
	if f.swarmKey != "" {
		cfg.SwarmKey = f.swarmKey
	}
	if f.open {
		cfg.Open = true
	}
	if f.dhtMode != "" {
		cfg.DHTMode = f.dhtMode
	}
	if f.heartbeat != 0 {
		cfg.Heartbeat = node.Duration(f.heartbeat)
	}
	if f.device != "" {
		cfg.Device = f.device
	}
	seen := map[string]string{}
	for _, r := range f.roles {
		role, path, ok := strings.Cut(r, "=")
		if !ok || role == "" || path == "" {
			return cfg, fmt.Errorf("--role %q: want ROLE=PATH.gguf", r)
		}
		if prev, dup := seen[role]; dup {
			return cfg, fmt.Errorf("--role %s given twice (%s and %s): a peer serves each role with one model", role, prev, path)
		}
		seen[role] = path
		if cfg.Roles == nil {
			cfg.Roles = map[string]string{}
		}
		cfg.Roles[role] = path
	}
	if len(f.shards) > 0 {
		cfg.Shards = append(cfg.Shards, f.shards...)
	}
	if f.given["threads"] {
		cfg.Engine.Threads = f.threads
	}
	if f.given["slots"] {
		cfg.Engine.Slots = f.slots
	}
	if f.given["gpu-layers"] {
		cfg.Engine.GPULayers = &f.gpuLayers
	}
	if f.gpuLibs != "" {
		cfg.Engine.GPULibs = f.gpuLibs
	}
	if f.bmcSerial != "" {
		cfg.BMCSerial = f.bmcSerial
	}
	if f.bmcKey != "" {
		cfg.BMCKey = f.bmcKey
	}
	if f.bmcDTR {
		cfg.BMCDTR = true
	}
	cfg.BMCPeers = append(cfg.BMCPeers, f.bmcPeers...)
	cfg.NAT.Relays = append(cfg.NAT.Relays, f.relays...)
	if f.relayService != "" {
		cfg.NAT.RelayService = f.relayService
	}
	if f.maxMemory != "" {
		v, err := node.ParseByteSize(f.maxMemory)
		if err != nil {
			return cfg, fmt.Errorf("--max-memory: %w", err)
		}
		cfg.MaxMemory = v
	}
	if f.reachability != "" {
		cfg.NAT.Reachability = f.reachability
	}
	if tok := os.Getenv("SWARM_API_TOKEN"); tok != "" {
		cfg.APIToken = tok
	}
	// Hugging Face's own variables, as its clients read them.
	if ep := os.Getenv("HF_ENDPOINT"); ep != "" {
		cfg.Hub.Endpoint = ep
	}
	if tok := os.Getenv("HF_TOKEN"); tok != "" {
		cfg.Hub.Token = tok
	}
	return cfg, nil
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	return slog.New(h), nil
}

func runDaemon(args []string, stdout, stderr io.Writer) int {
	f, fs, err := parseDaemonFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, fs)
		return 0
	}
	if err != nil {
		if err != errPrinted {
			fmt.Fprintln(stderr, "swarmd:", err)
		}
		fmt.Fprintln(stderr, "Run 'swarmd -h' for usage.")
		return 2
	}
	log, err := newLogger(f.logFormat, f.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "swarmd:", err)
		return 2
	}
	cfg, err := f.buildConfig()
	if err != nil {
		fmt.Fprintln(stderr, "swarmd:", err)
		return 2
	}
	if why := cpuMissing(); why != "" {
		fmt.Fprintln(stderr, "swarmd:", why)
		return 1
	}
	// go-libp2p logs through the same handler, floored at warn: its info
	// and debug lines are for libp2p developers.
	gologshim.SetDefaultHandler(floor{log.Handler(), slog.LevelWarn})
	// ollama's engine logs each model load through the default logger.
	slog.SetDefault(slog.New(floor{log.Handler(), slog.LevelWarn}))
	engine.WarnIfNoSIMD(log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP is caught before the peer starts: once api.addr is written a
	// tool may reload at once, and an uncaught SIGHUP ends the process. One
	// that comes while the peer starts is applied when it has.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if f.join != "" {
		if err := joinBeforeStart(cfg, f.join, log); err != nil {
			fmt.Fprintln(stderr, "swarmd:", err)
			if errors.Is(err, node.ErrDataDirInUse) {
				return 1 // as when the peer's start finds the dir in use
			}
			return 2
		}
	}
	n := &node.Node{Config: cfg, Logger: log}
	n.API = api.New(n, log)
	if err := n.Start(ctx); err != nil {
		n.Close()
		fmt.Fprintln(stderr, "swarmd:", err)
		return 1
	}
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-hup:
			f.reload(ctx, n, log)
		case <-n.RestartRequested():
			if n, err = f.restart(ctx, n, log); err != nil {
				fmt.Fprintln(stderr, "swarmd:", err)
				return 1
			}
		}
	}
	log.Info("shutting down")
	if err := n.Close(); err != nil {
		log.Warn("shutdown", "err", err)
	}
	return 0
}

// floor drops records below a minimum level.
type floor struct {
	slog.Handler
	min slog.Level
}

func (f floor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}
func (f floor) WithAttrs(a []slog.Attr) slog.Handler { return floor{f.Handler.WithAttrs(a), f.min} }
func (f floor) WithGroup(g string) slog.Handler      { return floor{f.Handler.WithGroup(g), f.min} }

// reload re-reads the config file and the flags, as at start, and applies
// their roles and shards to the running peer (SIGHUP).
func (f *daemonFlags) reload(ctx context.Context, n *node.Node, log *slog.Logger) {
	cfg, err := f.buildConfig()
	if err != nil {
		log.Error("reload: config not applied", "err", err)
		return
	}
	done, err := n.Reload(ctx, cfg)
	for _, d := range done {
		log.Info("reload: " + d)
	}
	if err != nil {
		log.Error("reload", "err", err)
		return
	}
	log.Info("reload: done", "changes", len(done))
}
