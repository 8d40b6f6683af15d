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

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

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
	listen := fs.String("listen", ":8080", "address the API and the UI listen on")
	storeDir := fs.String("store-dir", "/var/lib/clawfarm/traces", "where traces are stored (a PersistentVolume)")
	retention := fs.Duration("retention", 30*24*time.Hour, "how long an attempt's trace is kept after its last upload; 0 keeps it as long as its run")
	sweep := fs.Duration("sweep-interval", 10*time.Minute, "how often traces past retention, or of deleted runs, are removed")
	audience := fs.String("audience", trace.DefaultAudience, "the audience loop pods' tokens must carry")
	certFile := fs.String("tls-cert-file", "", "serve HTTPS with this certificate (with --tls-private-key-file)")
	keyFile := fs.String("tls-private-key-file", "", "the certificate's key")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster, then $KUBECONFIG)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if *retention < 0 || *sweep <= 0 {
		return errors.New("--retention must be 0 or more and --sweep-interval more than 0")
	}
	if *kubeconfig != "" {
		os.Setenv("KUBECONFIG", *kubeconfig)
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
	runs, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	store, err := trace.NewFSStore(*storeDir)
	if err != nil {
		return err
	}
	srv := &trace.Server{Store: store, Runs: runs, Auth: trace.NewKubeAuthority(cs, *audience), Logf: logf}

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
		return errors.New("the AgentRun cache did not sync")
	}
	go sweepLoop(ctx, srv, *retention, *sweep)

	hs := &http.Server{Addr: *listen, Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() {
		if *certFile != "" {
			errc <- hs.ListenAndServeTLS(*certFile, *keyFile)
			return
		}
		logf("serving plain HTTP on %s: tokens cross the network in the clear unless a mesh or --tls-cert-file protects them", *listen)
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
