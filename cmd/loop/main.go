// Command loop is the agent engine of one attempt of one AgentRun: it reads
// its settings (docs/loop-contract.md), connects to the rig and the model,
// runs the session, writes the termination message and exits with the
// sentinel's code. It only wires; the engine lives in internal/engine.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/progress"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/presets"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Test seams: how long the rig may stay unreachable (0: the rig client's
// default), and the session's clock (nil: the wall clock).
var (
	rigReconnectWindow time.Duration
	sessionClock       engine.Clock
)

// run is main without the process: settings in, exit code out.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == contract.OwnStateCommand {
		return ownState(args[1:], stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		return badConfig(cfg, err, stderr)
	}
	red := redact.New(cfg.APIKey)
	logf := func(format string, a ...any) {
		fmt.Fprintln(stderr, red.String("loop: "+fmt.Sprintf(format, a...)))
	}

	bootstrap, err := loadBootstrap(cfg.BootstrapDirs)
	if err != nil {
		return badConfig(cfg, err, stderr)
	}
	maxOut := cfg.MaxOutputTokens
	if maxOut == 0 {
		maxOut = provider.DefaultMaxTokens
	}
	model, err := presets.New(cfg.ModelProvider, cfg.ModelAPI, provider.Options{
		BaseURL: cfg.ModelBaseURL, APIKey: cfg.APIKey, Model: cfg.Model, MaxTokens: maxOut,
		IdleTimeout: time.Duration(cfg.ModelTimeoutSeconds) * time.Second,
	}, cfg.ThinkingBudgetTokens)
	if err != nil {
		return badConfig(cfg, err, stderr)
	}

	clk := sessionClock
	if clk == nil {
		clk = engine.RealClock{}
	}
	toolPolicies, approver, err := toolPoliciesFor(cfg, clk, logf)
	if err != nil {
		return badConfig(cfg, err, stderr)
	}

	var sink engine.ProgressSink
	var patcher *progress.Patcher
	if cfg.Run != "" {
		if patcher, err = progress.NewInCluster(cfg.Run, time.Duration(cfg.ProgressHeartbeatSeconds)*time.Second, logf); err != nil {
			logf("progress will not be patched: %v", err)
		} else {
			sink = patcher
		}
	}

	tracer := openTelemetry(cfg, getenv, logf)
	if tracer != nil {
		defer tracer.close()
	}

	budget := time.Duration(cfg.SessionSeconds) * time.Second
	var msg contract.TerminationMessage
	ec := engine.Config{
		Run: cfg.Run, Attempt: cfg.Attempt, Trigger: cfg.Trigger,
		MaxTurns: cfg.MaxTurns, SessionBudget: budget, ContextWindow: cfg.ContextWindow,
		MaxErrors: cfg.MaxErrors, MaxInputTokens: cfg.MaxInputTokens, RunInputTokensLeft: cfg.RunInputTokensLeft,
		Bootstrap: bootstrap, SystemAppend: cfg.SystemPromptAppend,
		// The reply, its thinking, and a fold stay free in the context window.
		ReplyReserve: maxOut + cfg.ThinkingBudgetTokens + tokens.FoldReserve,
		Provider:     model, Progress: sink, Redactor: red,
		Hooks:    hooks.Chain{hooks.NewDenyTools(cfg.DenyTools), policies.ToolPolicies{P: toolPolicies}},
		Approver: approver, Clock: clk,
		Logf: logf, Tracer: tracer.get(),
	}
	if at, keep := cfg.fold(); at > 0 {
		ec.Compactor = compaction.Policy{At: at, Keep: keep}
	}
	em := events.NewEmitter(stdout, red, nil)
	dir, closeState, err := openState(cfg.StateDir, logf)
	var files *attemptFiles
	if err == nil {
		defer closeState()
		files, err = wire(&ec, dir, cfg, logf)
		if err == nil {
			defer files.Close()
			if ec.Resume == nil {
				ec.State.Steered = cfg.Steered // the opening message carries these
			}
			ec.Inbox = inboxFor(cfg, ec.State, logf)
			sinks := []io.Writer{stdout, files.trace}
			if cfg.TraceURL != "" && cfg.Run != "" {
				// The notice comes only after something was queued, so after em is set.
				sinks = append(sinks, files.startUpload(cfg, func(text string) {
					em.Emit(events.Error(0, "trace_upload", text, 0))
				}))
			}
			em = events.NewEmitter(io.MultiWriter(sinks...), red, nil)
		}
	}
	if bad := unwritableState(cfg.StateDir, err); bad != nil {
		if patcher != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			patcher.Close(cctx)
			cancel()
		}
		return badConfig(cfg, bad, stderr)
	}
	if err != nil {
		// The state directory is locked by another loop, or unusable: this
		// attempt cannot run on this rig now; a fresh one may.
		msg = contract.TerminationMessage{Sentinel: contract.Stuck, Retryable: true, ExitReason: contract.ReasonRigUnavailable,
			Recap: red.String("stopped before the first turn: the rig's state directory: " + err.Error())}
		em.Emit(events.Done(msg))
	} else if rc, err := rig.Dial(ctx, rigConfig(cfg, getenv, tracer.get())); err != nil {
		reason, text := contract.ReasonRigUnavailable, "stopped before the first turn: "+err.Error()
		if ctx.Err() != nil {
			reason, text = contract.ReasonUserCancel, "stopped before the first turn: the attempt was cancelled"
		}
		msg = contract.TerminationMessage{Sentinel: contract.Stuck, Retryable: true, ExitReason: reason, Recap: red.String(text)}
		em.Emit(events.Done(msg))
	} else {
		defer rc.Close()
		ec.Rig, ec.Events = rc, em
		msg = runSession(ctx, ec, logf)
	}
	if patcher != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		patcher.Close(cctx)
		cancel()
	}
	if err := contract.WriteTerminationMessage(cfg.TerminationLog, msg); err != nil {
		logf("%v", err)
	}
	return msg.ExitCode()
}

// rigConfig is the rig client's configuration: the endpoint, and who is
// calling — the run, the attempt and the pod, whose name Kubernetes (and
// rignode) put in HOSTNAME — sent to the rig with every request
// (docs/rig-contract.md, "Who is calling").
func rigConfig(cfg config, getenv func(string) string, tr trace.Tracer) rig.Config {
	return rig.Config{Endpoint: cfg.RigEndpoint, ReconnectWindow: rigReconnectWindow,
		Run: cfg.Run, Attempt: cfg.Attempt, Pod: strings.TrimSpace(getenv("HOSTNAME")), TokenFile: cfg.RigTokenFile, Tracer: tr}
}

// otelExport is the attempt's OpenTelemetry export (docs/otel.md).
type otelExport struct {
	exp  *telemetry.Exporter
	logf func(string, ...any)
}

// openTelemetry sets up the span export the OTEL_* environment asks for;
// nil when it asks for none, or for one the loop cannot do (logged: a
// session never fails for its telemetry).
func openTelemetry(cfg config, getenv func(string) string, logf func(string, ...any)) *otelExport {
	exp, err := telemetry.FromEnv(getenv, telemetry.Identity{Run: cfg.Run, Attempt: cfg.Attempt, Pod: strings.TrimSpace(getenv("HOSTNAME"))})
	if err != nil {
		logf("OpenTelemetry: %v; no spans are exported", err)
	}
	if exp == nil {
		return nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(telemetry.ErrorLog(logf, time.Now)))
	logf("OpenTelemetry: exporting spans to %s", exp.Endpoint())
	return &otelExport{exp: exp, logf: logf}
}

// get is the tracer; nil without an export.
func (o *otelExport) get() trace.Tracer {
	if o == nil {
		return nil
	}
	return o.exp.Tracer()
}

// close flushes the spans left, bounded by telemetry.ShutdownTimeout.
func (o *otelExport) close() {
	if err := o.exp.Shutdown(); err != nil {
		o.logf("OpenTelemetry: the last spans were not all sent: %v", err)
	}
}

// runSession runs the engine, turning a panic into a retryable STUCK: Go
// exits a panicking process with code 2, which the operator would read as
// bad configuration.
func runSession(ctx context.Context, cfg engine.Config, logf func(string, ...any)) (msg contract.TerminationMessage) {
	defer func() {
		if r := recover(); r != nil {
			logf("engine crashed: %v\n%s", r, debug.Stack())
			msg = contract.TerminationMessage{Sentinel: contract.Stuck, Retryable: true, ExitReason: contract.ReasonFatalError,
				Recap: cfg.Redactor.String(fmt.Sprintf("stopped: the engine crashed: %v", r))}
		}
	}()
	return engine.New(cfg).Run(ctx)
}

// badConfig reports a setting the loop cannot use: on stderr, and as plain
// text in the termination log (not the JSON message: there is no sentinel),
// so it shows in the pod's status. Exit code 2.
func badConfig(cfg config, err error, stderr io.Writer) int {
	text := redact.New(cfg.APIKey).String("loop: bad configuration: " + err.Error())
	fmt.Fprintln(stderr, text)
	path := cfg.TerminationLog
	if path == "" {
		path = contract.DefaultTerminationLog
	}
	_ = os.WriteFile(path, []byte(text), 0o644)
	return contract.ExitInvalidConfig
}
