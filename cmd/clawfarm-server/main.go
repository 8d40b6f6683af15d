// Command clawfarm-server is the trace server: loop pods upload their
// attempts' events and screens to it, and people read them in its web UI or
// through its HTTP API (`kubectl claw trace`, `kubectl claw ui`). Writers
// and readers are authenticated and authorized by the Kubernetes API server
// (docs/ui.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/trace"
	"github.com/clawfarm/clawfarm/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clawfarm-server:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format(time.RFC3339)+" "+format+"\n", args...)
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("clawfarm-server", flag.ContinueOnError)
	f := trace.NewFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := f.Check(); err != nil {
		return err
	}
	if f.Kubeconfig != "" {
		os.Setenv("KUBECONFIG", f.Kubeconfig)
	}
	logf("clawfarm-server %s (%s)", version.Version, version.Revision)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := farmv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	// The runs (the traces' index) and the attempt pods loop tokens are
	// bound to: a writer is refused the moment its pod is gone.
	runs, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{farmv1.LabelKind: "attempt"})},
	}})
	if err != nil {
		return err
	}
	if _, err := runs.GetInformer(ctx, &corev1.Pod{}); err != nil {
		return err
	}
	var store trace.Store
	if f.S3.Bucket != "" {
		store, err = trace.NewS3Store(ctx, f.S3)
		logf("traces in the S3 bucket %s at %s", f.S3.Bucket, f.S3.Endpoint)
	} else {
		store, err = trace.NewFSStore(f.StoreDir)
		logf("traces in %s", f.StoreDir)
	}
	if err != nil {
		return err
	}
	auth := trace.NewKubeAuthority(cs, f.Audience)
	auth.Pods = runs
	srv := &trace.Server{Store: store, Runs: runs, Auth: auth, Logf: logf, MaxAttemptBytes: f.MaxAttemptBytes}

	inf, err := runs.GetInformer(ctx, &farmv1.AgentRun{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if run, ok := obj.(*farmv1.AgentRun); ok {
			if err := srv.Forget(context.Background(), run); err != nil {
				logf("deleting the trace of %s/%s: %v", run.Namespace, run.Name, err)
			}
		}
	}}); err != nil {
		return err
	}
	go func() {
		if err := runs.Start(ctx); err != nil {
			logf("cache: %v", err)
		}
	}()
	if !runs.WaitForCacheSync(ctx) {
		return errors.New("the AgentRun and attempt-pod cache did not sync")
	}
	go sweepLoop(ctx, srv, f.Retention, f.Sweep)

	hs := &http.Server{Addr: f.Listen, Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() {
		if f.CertFile != "" {
			errc <- hs.ListenAndServeTLS(f.CertFile, f.KeyFile)
			return
		}
		logf("serving plain HTTP on %s: tokens cross the network in the clear unless a mesh or --tls-cert-file protects them", f.Listen)
		errc <- hs.ListenAndServe()
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

func sweepLoop(ctx context.Context, srv *trace.Server, retention, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := srv.Sweep(ctx, retention, time.Now())
		if err != nil && ctx.Err() == nil {
			logf("sweep: %v", err)
		} else if n > 0 {
			logf("sweep: removed %d traces (deleted runs, or past --retention=%s)", n, retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
