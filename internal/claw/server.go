package claw

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	//lint:ignore SA1019 client-go's portforward and spdy packages still take and return this package's Dialer
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// Where the trace server is, by default: the chart's Service in the
// operator's namespace.
const (
	defaultServerNamespace = "clawfarm-system"
	defaultServerService   = "clawfarm-server"
)

// serverFlags say how to reach the trace server.
type serverFlags struct {
	namespace string
	service   string
	url       string
}

func (s *serverFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&s.namespace, "server-namespace", defaultServerNamespace, "namespace of the trace server's Service")
	fl.StringVar(&s.service, "server-service", defaultServerService, "the trace server's Service; its pods are reached by port-forward through the API server")
	fl.StringVar(&s.url, "server-url", "", "the trace server's URL (an Ingress), instead of a port-forward")
}

// traceServer is the trace server as the user reaches it: a base URL
// (a port-forward's local end, or --server-url) and the user's token.
type traceServer struct {
	token *userToken
	http  *http.Client
	// transport carries the requests (ui's proxy uses it too).
	transport http.RoundTripper
	// base returns the server's URL, re-establishing a lost port-forward.
	base func(ctx context.Context) (*url.URL, error)
	stop func()
}

// traceServer connects to the trace server as the kubeconfig's user.
func (o *Options) traceServer(ctx context.Context, sf *serverFlags) (*traceServer, error) {
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	tok, err := newUserToken(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := tok.Token(ctx); err != nil {
		return nil, err
	}
	ts := &traceServer{token: tok, http: &http.Client{}, transport: http.DefaultTransport, stop: func() {}}
	if sf.url != "" {
		u, err := serverURL(sf.url)
		if err != nil {
			return nil, err
		}
		ts.base = func(context.Context) (*url.URL, error) { return u, nil }
		return ts, nil
	}
	f := &forwarder{cfg: cfg, namespace: sf.namespace, service: sf.service, errOut: o.Streams.ErrOut}
	if f.core, err = corev1client.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if _, err := f.url(ctx); err != nil {
		return nil, err
	}
	ts.base = f.url
	ts.stop = f.close
	// A server that speaks HTTPS is reached at 127.0.0.1, the forward's
	// end, with a certificate for its own names and a CA the plugin does
	// not have: the certificate is not checked. The tunnel itself is the
	// API server's, to the pod it named.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	ts.transport = tr
	ts.http = &http.Client{Transport: tr}
	return ts, nil
}

// get asks the trace server for path as the user and returns the response
// of a 2xx; any other status is an error with the server's sentence.
func (ts *traceServer) get(ctx context.Context, path string, header ...string) (*http.Response, error) {
	base, err := ts.base(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := ts.token.Token(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("trace server: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &exitError{code: ExitError, msg: fmt.Sprintf("trace server: %s: %s", resp.Status, strings.TrimSpace(string(b)))}
	}
	return resp, nil
}

// forwarder keeps a port-forward through the API server to a Ready pod
// behind the trace server's Service, on a loopback port.
type forwarder struct {
	cfg                *rest.Config
	core               corev1client.CoreV1Interface
	namespace, service string
	errOut             io.Writer

	mu    sync.Mutex
	local string          // 127.0.0.1:port of the live forward
	https bool            // the pod's port speaks HTTPS
	lost  <-chan struct{} // closed when the forward ends
	stop  context.CancelFunc
}

// url returns the URL of the forward's local end, starting a forward when
// there is none or the last one was lost (its pod went away).
func (f *forwarder) url(ctx context.Context) (*url.URL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := false
	if f.local != "" {
		select {
		case <-f.lost:
		default:
			live = true
		}
	}
	if !live {
		pod, port, https, err := f.target(ctx)
		if err != nil {
			return nil, err
		}
		local, lost, stop, err := f.start(pod, port)
		if err != nil {
			return nil, err
		}
		f.local, f.lost, f.stop, f.https = local, lost, stop, https
	}
	u := &url.URL{Scheme: "http", Host: f.local}
	if f.https {
		u.Scheme = "https"
	}
	return u, nil
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop != nil {
		f.stop()
		<-f.lost
	}
}

// target picks a Ready pod the Service selects and the pod port its
// (first, or "http") service port targets, and says whether that port
// speaks HTTPS (the pod's probes of it do: the chart's server.tls).
func (f *forwarder) target(ctx context.Context) (string, int, bool, error) {
	where := fmt.Sprintf("service %s in namespace %s", f.service, f.namespace)
	svc, err := f.core.Services(f.namespace).Get(ctx, f.service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", 0, false, &exitError{code: ExitError, msg: where + " not found: is the trace server installed? " +
			"Name it with --server-namespace and --server-service, or give --server-url"}
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("%s: %w", where, err)
	}
	if len(svc.Spec.Selector) == 0 || len(svc.Spec.Ports) == 0 {
		return "", 0, false, &exitError{code: ExitError, msg: where + " has no selector or no port: kubectl claw port-forwards to the pods it selects"}
	}
	sp := svc.Spec.Ports[0]
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			sp = p
		}
	}
	pods, err := f.core.Pods(f.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return "", 0, false, fmt.Errorf("pods of %s: %w", where, err)
	}
	// The newest Ready pod: during a rollout, the one that stays.
	items := pods.Items
	sort.Slice(items, func(i, j int) bool { return items[j].CreationTimestamp.Before(&items[i].CreationTimestamp) })
	for i := range items {
		p := &items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		port, ok := targetPort(p, sp)
		if !ok {
			continue
		}
		return p.Name, port, probedHTTPS(p, port), nil
	}
	return "", 0, false, &exitError{code: ExitError, msg: fmt.Sprintf("no Ready pod of %s (%d pods match its selector): kubectl -n %s get pods -l %s",
		where, len(items), f.namespace, labels.SelectorFromSet(svc.Spec.Selector))}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetPort resolves a service port's targetPort on a pod: a number, or
// the name of a container port (default: the service port itself).
func targetPort(p *corev1.Pod, sp corev1.ServicePort) (int, bool) {
	tp := sp.TargetPort
	switch {
	case tp.Type == intstr.String && tp.StrVal != "":
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == tp.StrVal {
					return int(cp.ContainerPort), true
				}
			}
		}
		return 0, false
	case tp.IntVal != 0:
		return int(tp.IntVal), true
	}
	return int(sp.Port), true
}

// probedHTTPS reports whether a probe of the pod checks port over HTTPS.
func probedHTTPS(p *corev1.Pod, port int) bool {
	for _, c := range p.Spec.Containers {
		for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				continue
			}
			pp := pr.HTTPGet.Port
			if pp.Type == intstr.Int && int(pp.IntVal) == port {
				return true
			}
			for _, cp := range c.Ports {
				if pp.Type == intstr.String && cp.Name == pp.StrVal && int(cp.ContainerPort) == port {
					return true
				}
			}
		}
	}
	return false
}

// start forwards a loopback port to the pod's port, the way kubectl
// port-forward does: SPDY tunnelled over a websocket, else plain SPDY.
func (f *forwarder) start(pod string, port int) (string, <-chan struct{}, context.CancelFunc, error) {
	u := f.core.RESTClient().Post().Resource("pods").Namespace(f.namespace).Name(pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(f.cfg)
	if err != nil {
		return "", nil, nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, f.cfg)
	if err != nil {
		return "", nil, nil, err
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var errOut strings.Builder
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, &errOut)
	if err != nil {
		cancel()
		return "", nil, nil, err
	}
	lost := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(lost)
		failed <- pf.ForwardPorts()
	}()
	where := fmt.Sprintf("pod %s/%s port %d", f.namespace, pod, port)
	select {
	case <-ready:
	case err := <-failed:
		cancel()
		return "", nil, nil, forwardError(where, err, errOut.String())
	case <-time.After(30 * time.Second):
		cancel()
		return "", nil, nil, fmt.Errorf("port-forward to %s: not ready after 30s", where)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		cancel()
		return "", nil, nil, fmt.Errorf("port-forward to %s: %v", where, err)
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[0].Local)), lost, cancel, nil
}

func forwardError(where string, err error, detail string) error {
	msg := err.Error()
	if d := strings.TrimSpace(detail); d != "" {
		msg += ": " + d
	}
	if strings.Contains(strings.ToLower(msg), "forbidden") {
		return &exitError{code: ExitError, msg: fmt.Sprintf("port-forward to %s: %s (you need get and create on pods/portforward there, or give --server-url)", where, msg)}
	}
	return fmt.Errorf("port-forward to %s: %s", where, msg)
}
