// Command kubectl-claw is the kubectl plugin for clawfarm: `kubectl claw run`,
// `wait`, `logs`, `trace`, `ui`, `cancel` and `rigs` (docs/kubectl-claw.md).
// The logic is in internal/claw; this is wiring only.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/clawfarm/clawfarm/internal/claw"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := claw.Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
