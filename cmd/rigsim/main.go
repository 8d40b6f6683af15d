// Command rigsim serves simulated PhysiClaw rigs: the rig's MCP tools over streamable HTTP,
// its health route, and /api/sim/ for ground truth and fault injection. See docs/rigsim.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rigsim:", err)
		os.Exit(2)
	}
}

// shutdownGrace is how long open requests get to finish after SIGTERM.
const shutdownGrace = 5 * time.Second

func run(args []string) error {
	fs := flag.NewFlagSet("rigsim", flag.ContinueOnError)
	listen := fs.String("listen", ":8048", "address to listen on (a PhysiClaw rig listens on 8048)")
	rigs := fs.Int("rigs", 1, "how many rigs to simulate; with more than one they are served under /rigs/<name>/")
	portPerRig := fs.Bool("port-per-rig", false, "also serve rig i at the root of its own port, the listen port + 1 + i")
	configPath := fs.String("config", "", "a rig configuration file (YAML or JSON): seed, phone, faults")
	seed := fs.Uint64("seed", 0, "seed for glare, missed taps and the other random faults (overrides the config's)")
	timeScale := fs.Float64("time-scale", -1, "real seconds slept per simulated tool second: 1 is real time, 0 instant (default 0.05, or the config's)")
	wallClock := fs.Bool("wall-clock", true, "the phone's clock also follows real time (timers count down while nobody looks)")
	passcode := fs.String("passcode", "", "the phone's passcode (the rig types 111111; anything else makes unlock_phone fail)")
	locked := fs.Bool("locked", false, "start with the phone locked")
	replyAfter := fs.Duration("reply-after", 0, "how long a Messages contact takes to answer (default 2m)")
	glare := fs.Float64("glare", 0, "fault: fraction of text labels the camera drops or misreads")
	missed := fs.Float64("missed-taps", 0, "fault: fraction of touches that do nothing")
	offset := fs.String("tap-offset", "", "fault: constant touch offset dx,dy in screen fractions (a bumped rig), e.g. 0.03,0")
	crash := fs.String("crash-app", "", "fault: this app crashes when a gesture next leaves it in the foreground")
	hiccups := fs.Float64("camera-hiccups", 0, "fault: fraction of gestures that come back text-only")
	noVerdict := fs.Float64("no-verdict", 0, "fault: fraction of gestures whose frames could not be compared (the view comes back, no verdict)")
	busy := fs.Float64("busy", 0, "fault: fraction of calls refused as busy")
	bridgeDown := fs.Bool("bridge-down", false, "fault: the phone bridge is down (screenshot fails, the clipboard is not confirmed)")
	sessionIdle := fs.Duration("session-idle", 0, "the session ledger closes a session after this long without a tool call (default 10m, or the config's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := rigsim.Config{TimeScale: 0.05}
	if *configPath != "" {
		c, err := rigsim.LoadConfig(*configPath)
		if err != nil {
			return err
		}
		cfg = c
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["seed"] {
		cfg.Seed = *seed
	}
	if *timeScale >= 0 {
		cfg.TimeScale = *timeScale
	}
	if set["wall-clock"] || *configPath == "" {
		cfg.WallClock = *wallClock
	}
	if *passcode != "" {
		cfg.Phone.Passcode = *passcode
	}
	if set["locked"] {
		cfg.Phone.Locked = *locked
	}
	if *replyAfter > 0 {
		cfg.Phone.ReplyAfter = rigsim.Duration(*replyAfter)
	}
	if set["session-idle"] {
		if *sessionIdle <= 0 {
			return fmt.Errorf("--session-idle=%s: want a positive duration such as 30s", *sessionIdle)
		}
		cfg.SessionIdle = rigsim.Duration(*sessionIdle)
	}
	f := &cfg.Faults
	if set["glare"] {
		f.Glare = *glare
	}
	if set["missed-taps"] {
		f.MissedTaps = *missed
	}
	if *offset != "" {
		var dx, dy float64
		if _, err := fmt.Sscanf(*offset, "%g,%g", &dx, &dy); err != nil {
			return fmt.Errorf("--tap-offset=%q: want dx,dy such as 0.03,0", *offset)
		}
		f.TapOffset = [2]float64{dx, dy}
	}
	if *crash != "" {
		f.CrashApp = *crash
	}
	if set["camera-hiccups"] {
		f.CameraHiccups = *hiccups
	}
	if set["no-verdict"] {
		f.NoVerdict = *noVerdict
	}
	if set["busy"] {
		f.Busy = *busy
	}
	if *bridgeDown {
		if f.Health == nil {
			f.Health = map[string]bool{}
		}
		f.Health["bridge"] = false
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if *rigs < 1 {
		return fmt.Errorf("--rigs=%d: want at least 1", *rigs)
	}
	if err := cfg.CheckFarm(*rigs); err != nil {
		return fmt.Errorf("%w (--rigs=%d)", err, *rigs)
	}
	return serve(*listen, *rigs, *portPerRig, cfg)
}

func serve(listen string, n int, portPerRig bool, cfg rigsim.Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	farm := rigsim.NewFarm(n, cfg)
	var handler http.Handler = farm.Handler()
	if n == 1 {
		// The farm's routes, and rig-0 at the root.
		mux := http.NewServeMux()
		mux.Handle("/rigs", handler)
		mux.Handle("/rigs/", handler)
		mux.Handle("/api/sim/ledger", handler)
		mux.Handle("/", farm.Rigs[0].Handler())
		handler = mux
	}
	servers := []*http.Server{}
	errs := make(chan error, n+1)
	start := func(addr string, h http.Handler, what string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		fmt.Printf("rigsim: %s listening on http://%s\n", what, ln.Addr())
		go func() { errs <- srv.Serve(ln) }()
		return nil
	}
	if err := start(listen, handler, fmt.Sprintf("%d rig(s)", n)); err != nil {
		return err
	}
	if portPerRig {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return fmt.Errorf("--listen=%q: %w", listen, err)
		}
		base, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("--port-per-rig needs a numeric port in --listen, got %q", port)
		}
		for i, r := range farm.Rigs {
			if err := start(net.JoinHostPort(host, strconv.Itoa(base+1+i)), r.Handler(), r.Name()); err != nil {
				return err
			}
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	fmt.Println("rigsim: stopped")
	return nil
}
