// Command modelsim serves a scripted model on the OpenAI Chat Completions and Responses
// wires and Anthropic's Messages wire (tests, offline demos). See docs/modelsim.md.
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
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "modelsim:", err)
		os.Exit(2)
	}
}

// shutdownGrace is how long open requests get to finish after SIGTERM.
const shutdownGrace = 5 * time.Second

func run(args []string) error {
	fs := flag.NewFlagSet("modelsim", flag.ContinueOnError)
	listen := fs.String("listen", ":8090", "address to listen on")
	dir := fs.String("scenarios", "", "a folder of scenario files (YAML or JSON) to add to, or replace, the built-in ones")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lib, err := modelsim.Builtin()
	if err != nil {
		return err
	}
	if *dir != "" {
		if err := lib.LoadDir(*dir); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: modelsim.NewServer(lib).Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("modelsim: listening on http://%s/v1 (scenarios: %v)\n", ln.Addr(), lib.Names())
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	fmt.Println("modelsim: stopped")
	return nil
}
