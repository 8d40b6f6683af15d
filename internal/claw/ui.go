package claw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

type uiFlags struct {
	server serverFlags
	port   int
	noOpen bool
}

func (o *Options) newUICommand() *cobra.Command {
	uf := &uiFlags{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Open the trace server's web UI through a local proxy that carries your credentials",
		Long: `ui serves the trace server's web UI on 127.0.0.1: a local proxy that sends
every request on to the trace server with your Kubernetes bearer token, so
the pages show the runs you may get. It reaches the server as trace does
(a port-forward through the API server, or --server-url), prints the
address, opens a browser unless --no-open, and runs until interrupted.`,
		Example: `  kubectl claw ui
  kubectl claw ui --port 8765 --no-open`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.ui(cmd.Context(), uf)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&uf.port, "port", 0, "local port to listen on, on 127.0.0.1 (0: any free port)")
	fl.BoolVar(&uf.noOpen, "no-open", false, "print the address only; do not open a browser")
	uf.server.addFlags(cmd)
	return cmd
}

func (o *Options) ui(ctx context.Context, uf *uiFlags) error {
	if uf.port < 0 || uf.port > 65535 {
		return usageError("--port %d is not a port (0-65535)", uf.port)
	}
	ts, err := o.traceServer(ctx, &uf.server)
	if err != nil {
		return err
	}
	defer ts.stop()
	// Loopback only: the proxy adds the user's token to what it forwards.
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(uf.port)))
	if err != nil {
		return &exitError{code: ExitError, msg: fmt.Sprintf("listen on 127.0.0.1:%d: %v (choose another --port)", uf.port, err)}
	}
	addr := l.Addr().String()
	srv := &http.Server{Handler: ts.proxy(addr, o.Streams.ErrOut), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	page := "http://" + addr + "/"
	fmt.Fprintf(o.Streams.Out, "The trace server's UI is at %s (Ctrl-C to stop)\n", page)
	if !uf.noOpen {
		o.openBrowser(page)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut) // live event streams do not end by themselves
	_ = srv.Close()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// proxy forwards the browser's requests to the trace server as the user.
// It answers only requests addressed to its own address, so a web page
// that points a host name at 127.0.0.1 (DNS rebinding) cannot use the
// user's token, and only reads (GET, HEAD): the readers' API has no other.
func (ts *traceServer) proxy(addr string, errOut io.Writer) http.Handler {
	localhost := "localhost:" + portOf(addr)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			base, _ := pr.In.Context().Value(baseKey{}).(*urlValue)
			pr.SetURL(base.u)
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Set("Authorization", "Bearer "+base.token)
		},
		Transport: ts.transport,
		// Server-sent events must reach the browser as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Fprintf(errOut, "trace server: %s %s: %v\n", r.Method, r.URL.Path, err)
			http.Error(w, "kubectl claw ui cannot reach the trace server: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != addr && r.Host != localhost {
			http.Error(w, "kubectl claw ui answers requests for "+addr+" only", http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "kubectl claw ui forwards reads only", http.StatusMethodNotAllowed)
			return
		}
		base, err := ts.base(r.Context())
		if err != nil {
			http.Error(w, "kubectl claw ui cannot reach the trace server: "+err.Error(), http.StatusBadGateway)
			return
		}
		tok, err := ts.token.Token(r.Context())
		if err != nil {
			http.Error(w, "kubectl claw ui has no token for you: "+err.Error(), http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), baseKey{}, &urlValue{base, tok})))
	})
}

type baseKey struct{}

// urlValue is where one request goes, and with which token.
type urlValue struct {
	u     *url.URL
	token string
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
