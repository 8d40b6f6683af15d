// Command devcluster runs clawfarm's local cluster on loopback (see
// docs/dev-cluster.md): `devcluster up`, `devcluster status`, `devcluster down`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

const usage = `usage: devcluster <command> [flags]

commands:
  up       start etcd, the control plane, rignode, rigsim, modelsim and the operator;
           returns once every rig is Ready (the cluster keeps running; --attach stays
           in the foreground and stops it on Ctrl-C)
  demo     up (a cluster already up in --dir is restarted: fresh phones), then apply config/demo/runs.yaml — one AgentRun per
           sentinel — and show them progressing until each has reached its sentinel.
           MODEL_BASE_URL, MODEL_API_KEY, MODEL_NAME (MODEL_PROVIDER) select a real provider.
  status   show the processes of the cluster in --dir
  down     stop every process of the cluster in --dir

flags (after the command):
`

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, usage)
		newFlags("up", &options{}).PrintDefaults()
		return 2
	}
	cmd, rest := args[0], args[1:]
	var o options
	fs := newFlags(cmd, &o)
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "devcluster %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	dir, err := o.resolveDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "[devcluster] "+format+"\n", a...) }
	switch cmd {
	case "up":
		return up(o, dir, logf)
	case "demo":
		return demo(o, dir, logf)
	case "down":
		if err := devcluster.Stop(dir, logf); err != nil {
			fmt.Fprintln(os.Stderr, "devcluster down:", err)
			return 1
		}
		return 0
	case "status":
		s, running, err := devcluster.Status(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "devcluster status:", err)
			return 1
		}
		fmt.Print(s)
		if !running {
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "devcluster: unknown command %q (want up, status or down)\n", cmd)
	return 2
}

type options struct {
	root, dir, manager, scenarios string
	rigs, basePort                int
	build, attach, kubeletSystem  bool
	probe, timeout                time.Duration
	rigsimArgs                    string
	kubeletRigs                   rigList
}

// rigList is a comma-separated list of rig indexes (--kubelet-rigs 3,4).
type rigList []int

func (l *rigList) String() string {
	var parts []string
	for _, i := range *l {
		parts = append(parts, strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}

func (l *rigList) Set(v string) error {
	*l = nil
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		i, err := strconv.Atoi(part)
		if err != nil {
			return fmt.Errorf("%q is not a rig number", part)
		}
		*l = append(*l, i)
	}
	return nil
}

func newFlags(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("devcluster "+cmd, flag.ContinueOnError)
	fs.StringVar(&o.root, "root", "", "the clawfarm checkout (default: found from the working directory)")
	fs.StringVar(&o.dir, "dir", "", "where the cluster keeps its files: kubeconfig, logs/, pki/, etcd/ (default <root>/.dev)")
	if cmd != "up" && cmd != "demo" {
		return fs
	}
	if cmd == "demo" {
		fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long the sample runs may take")
	}
	fs.IntVar(&o.rigs, "rigs", 5, "simulated rigs, registered as DeviceRigs rig-0 … rig-<N-1>")
	fs.IntVar(&o.basePort, "base-port", devcluster.DefaultBasePort, fmt.Sprintf("first of the %d loopback ports the cluster uses", devcluster.PortCount))
	fs.StringVar(&o.manager, "manager", string(devcluster.ManagerChart), "how the operator runs: chart (a pod from `helm template charts/clawfarm`), host (a host process) or none (no operator, rig gateway or DeviceRigs: install them yourself)")
	fs.StringVar(&o.scenarios, "scenarios", "", "folder of extra modelsim scenarios (default <root>/config/demo/scenarios)")
	fs.BoolVar(&o.build, "build", true, "go build the project's binaries into bin/ first")
	fs.BoolVar(&o.attach, "attach", false, "stay in the foreground; Ctrl-C stops the cluster")
	fs.DurationVar(&o.probe, "rig-probe-interval", 2*time.Second, "the operator's rig health probe period")
	fs.StringVar(&o.rigsimArgs, "rigsim-args", "--reply-after=30s", "extra rigsim flags, space-separated")
	fs.BoolVar(&o.kubeletSystem, "kubelet-system", false, "run the chart's manager and trace server as containers on "+devcluster.KubeletSystemNode+", a node run by a real kubelet and containerd (else rignode runs them)")
	fs.Var(&o.kubeletRigs, "kubelet-rigs", "rigs (e.g. 3,4) on "+devcluster.KubeletNode+", a node run by a real kubelet and containerd whose loop pods are containers; empty: none")
	return fs
}

func (o options) resolveDir() (string, error) {
	if o.dir != "" {
		return filepath.Abs(o.dir)
	}
	root := o.root
	if root == "" {
		var err error
		if root, err = devcluster.FindRoot(); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, ".dev"), nil
}

func (o options) config(dir string, logf func(string, ...any)) devcluster.Config {
	return devcluster.Config{
		Root: o.root, Dir: dir, Rigs: o.rigs, BasePort: o.basePort, Manager: devcluster.Manager(o.manager),
		Scenarios: o.scenarios, Build: o.build, RigProbeInterval: o.probe, RigsimArgs: strings.Fields(o.rigsimArgs), Log: logf,
		KubeletRigs: o.kubeletRigs, KubeletSystem: o.kubeletSystem,
	}
}

func up(o options, dir string, logf func(string, ...any)) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := devcluster.Up(ctx, o.config(dir, logf))
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster up:", err)
		return 1
	}
	fmt.Printf(`
The dev cluster is up: %d rigs (rigsim %s), modelsim at %s.
  export KUBECONFIG=%s
  kubectl get rig,ar
Logs are in %s/logs/. Stop it with: make dev-down (or devcluster down --dir %s)
`, c.Rigs, c.RigURL(0), c.ModelBaseURL(), c.Kubeconfig, dir, dir)
	if !o.attach {
		return 0
	}
	logf("attached: Ctrl-C stops the cluster")
	<-ctx.Done()
	c.Down()
	return 0
}

func demo(o options, dir string, logf func(string, ...any)) int {
	p, err := devcluster.ProviderFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster demo:", err)
		return 2
	}
	if devcluster.Manager(o.manager) == devcluster.ManagerNone {
		fmt.Fprintln(os.Stderr, "devcluster demo: --manager=none has no operator to run the demo's runs: use chart or host")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if devcluster.Running(dir) { // fresh phones and an empty etcd make the demo repeatable
		logf("restarting the dev cluster in %s for a clean demo", dir)
		if err := devcluster.Stop(dir, logf); err != nil {
			fmt.Fprintln(os.Stderr, "devcluster demo:", err)
			return 1
		}
	}
	c, err := devcluster.Up(ctx, o.config(dir, logf))
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster demo:", err)
		return 1
	}
	if err := c.Demo(ctx, os.Stdout, p, o.timeout); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster demo:", err)
		return 1
	}
	return 0
}
