package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/riggate"
	"github.com/clawfarm/clawfarm/internal/version"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// gatewayFlags are the flags of `rignode gateway`, bound to the flag set
// newGatewayFlags makes (the rig-host units' test reads the same set).
type gatewayFlags struct {
	kubeconfig, listen, audience *string
	rigs, public                 stringList
	watchInterval                *time.Duration
}

// newGatewayFlags makes the flag set of `rignode gateway`.
func newGatewayFlags() (*flag.FlagSet, *gatewayFlags) {
	fs := flag.NewFlagSet("rignode gateway", flag.ContinueOnError)
	f := &gatewayFlags{}
	f.kubeconfig = fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the gateway's identity: the rig host's node, bound to the chart's rig-gateway ClusterRole (default $KUBECONFIG)")
	f.listen = fs.String("listen", ":8050", "address to serve the rigs on: the host's address on the rig network (not 8048 or 8049: the rig server and its phone bridge take those)")
	fs.Var(&f.rigs, "rig", "a rig to front, namespace/rig=URL of its own server on this host's loopback (e.g. farm/rig-0=http://127.0.0.1:8048); repeat, or comma-separate")
	fs.Var(&f.public, "public-path", "a path under the rig that a GET reaches without a token (default /api/status, the health route); repeat")
	f.audience = fs.String("audience", contract.DefaultRigAudience, "the audience loop pods' rig tokens are projected for")
	f.watchInterval = fs.Duration("watch-interval", riggate.DefaultWatchInterval, "how often a rig's own watch route ("+contract.RigWatchPath+") is polled while the rig is free and the manager asks for its wake-ups; 0 turns wake-ups off")
	return fs, f
}

// gateway runs `rignode gateway`: the rig gateway in front of the rig
// host's phones (docs/rig-contract.md, "The rig gateway"). It is a process
// of its own, so the phones stay reachable to their sessions while rignode
// or the kubelet restarts.
func gateway(ctx context.Context, args []string) int {
	fs, f := newGatewayFlags()
	if err := fs.Parse(args); err != nil {
		return 2
	}
	kubeconfig, listen, rigs, public, audience := f.kubeconfig, f.listen, f.rigs, f.public, f.audience
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "rignode gateway: "+f+"\n", a...)
		return code
	}
	parsed, err := riggate.ParseRigs(rigs)
	if err != nil {
		return fail(2, "--rig: %v", err)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: *kubeconfig}, nil).ClientConfig()
	if err != nil {
		return fail(2, "kubeconfig: %v (pass --kubeconfig)", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "clawfarm-rig-gateway/" + version.String()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The watches' own log lines (client-go's reflectors, through
	// controller-runtime) go to the same place, at warnings and above.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	o := riggate.Options{Listen: *listen, Rigs: parsed, Config: cfg, Audience: *audience, WatchInterval: *f.watchInterval,
		Logf: func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) }}
	if len(public) > 0 {
		o.Public = public
	}
	if err := riggate.Serve(ctx, o); err != nil {
		return fail(1, "%v", err)
	}
	return 0
}
