package claw

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/spf13/cobra"
)

type traceFlags struct {
	server  serverFlags
	attempt int
	html    string
	zip     string
	open    bool
	prompt  bool
}

func (o *Options) newTraceCommand() *cobra.Command {
	tf := &traceFlags{}
	cmd := &cobra.Command{
		Use:   "trace RUN",
		Short: "Show a run's stored trace from the trace server, or save it as HTML or a zip",
		Long: `trace reads a run's trace from the trace server — the event stream the loop
uploaded — and prints the attempt as logs does, one line per turn. It
works after the attempt's pod is gone. --html saves the run as one
self-contained HTML page (every attempt, the screens inlined) and --zip
saves the attempt's events and screens; --open opens the HTML page in a
browser.

The trace server is reached by a port-forward through the API server to
a Ready pod of its Service (--server-namespace, --server-service), or at
--server-url. It authenticates you with the bearer token your kubeconfig
sends to the API server; a kubeconfig user with only a client
certificate needs --token.`,
		Example: `  kubectl claw trace set-a-timer
  kubectl claw trace set-a-timer --attempt 1 --zip set-a-timer-a1.zip
  kubectl claw trace set-a-timer --html set-a-timer.html --open`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.trace(cmd.Context(), args[0], tf)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&tf.attempt, "attempt", 0, "the attempt to print or zip, from 1 (default: the latest with a trace)")
	fl.StringVar(&tf.html, "html", "", "save the run page, screens inlined, as this HTML file")
	fl.StringVar(&tf.zip, "zip", "", "save the attempt's events and screens as this zip file")
	fl.BoolVar(&tf.prompt, "show-prompt", false, "print the system prompt's text under its line (default: its hash and size)")
	fl.BoolVar(&tf.open, "open", false, "open the saved HTML page in a browser (without --html, saved in a temporary directory)")
	tf.server.addFlags(cmd)
	return cmd
}

func (o *Options) trace(ctx context.Context, name string, tf *traceFlags) error {
	if tf.attempt < 0 {
		return usageError("--attempt counts from 1")
	}
	ns, _, err := o.Namespace()
	if err != nil {
		return err
	}
	ts, err := o.traceServer(ctx, &tf.server)
	if err != nil {
		return err
	}
	defer ts.stop()
	runPath := url.PathEscape(ns) + "/" + url.PathEscape(name)

	htmlFile := tf.html
	if tf.open && htmlFile == "" {
		dir, err := os.MkdirTemp("", "kubectl-claw-")
		if err != nil {
			return err
		}
		htmlFile = filepath.Join(dir, name+".html")
	}
	if htmlFile != "" {
		if err := ts.save(ctx, "/runs/"+runPath+"/export", htmlFile); err != nil {
			return err
		}
		fmt.Fprintf(o.Streams.Out, "wrote %s\n", htmlFile)
		if tf.open {
			o.openBrowser(htmlFile)
		}
	}
	if htmlFile != "" && tf.zip == "" {
		return nil
	}

	n, err := ts.attempt(ctx, runPath, name, tf.attempt)
	if err != nil {
		return err
	}
	attemptPath := "/api/v1/runs/" + runPath + "/attempts/" + strconv.Itoa(n)
	if tf.zip != "" {
		if err := ts.save(ctx, attemptPath+"/zip", tf.zip); err != nil {
			return err
		}
		fmt.Fprintf(o.Streams.Out, "wrote %s\n", tf.zip)
		return nil
	}
	resp, err := ts.get(ctx, attemptPath+"/events")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	r := &Renderer{Emit: func(s string) { fmt.Fprintln(o.Streams.Out, s) }, ShowPrompt: tf.prompt}
	err = scanLines(resp.Body, r.Line)
	r.Flush()
	return err
}

// attempt is the attempt asked for, or the latest with a stored trace.
func (ts *traceServer) attempt(ctx context.Context, runPath, name string, want int) (int, error) {
	resp, err := ts.get(ctx, "/api/v1/runs/"+runPath)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var run struct {
		Attempts []int `json:"attempts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil {
		return 0, fmt.Errorf("trace server: run %s: %w", name, err)
	}
	if len(run.Attempts) == 0 {
		return 0, &exitError{code: ExitError, msg: fmt.Sprintf("run %s has no trace on the trace server yet (kubectl claw logs %s reads the pod's log)", name, name)}
	}
	if want == 0 {
		return run.Attempts[len(run.Attempts)-1], nil
	}
	for _, a := range run.Attempts {
		if a == want {
			return a, nil
		}
	}
	return 0, &exitError{code: ExitError, msg: fmt.Sprintf("run %s has no trace of attempt %d (stored: %v)", name, want, run.Attempts)}
}

// save writes what the server answers for path into file, whole or not at all.
func (ts *traceServer) save(ctx context.Context, path, file string) error {
	resp, err := ts.get(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("trace server: %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// openBrowser opens target (a file or a URL) in the desktop's browser, or
// says where it is when there is none.
func (o *Options) openBrowser(target string) {
	if o.Browser != nil {
		if err := o.Browser(target); err == nil {
			return
		}
	} else if err := systemBrowser(target); err == nil {
		return
	}
	fmt.Fprintf(o.Streams.ErrOut, "no browser to open: open %s yourself\n", target)
}

func systemBrowser(target string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", target)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", target)
	default:
		cmd = exec.Command("xdg-open", target)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
