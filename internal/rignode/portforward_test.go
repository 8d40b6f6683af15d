package rignode_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	//lint:ignore SA1019 client-go's portforward and spdy packages still take and return this package's Dialer
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// kubectl port-forward reaches a rignode pod through the API server: the
// API server proxies the streams to rignode's kubelet API, which dials the
// pod's port on the host. Both of kubectl's dialers are exercised: SPDY,
// and SPDY tunnelled over a websocket that the API server translates.
func TestPortForwardThroughTheAPIServer(t *testing.T) {
	t.Parallel()
	port := freePort()
	pod := newPod(t, "echo", fmt.Sprint(port))
	pod = create(t, pod)
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	waitPod(t, pod, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
	waitLog(t, pod, "listening")

	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialer(url, restCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name   string
		dialer httpstream.Dialer
	}{{"spdy", spdyDialer}, {"websocket", wsDialer}} {
		t.Run(d.name, func(t *testing.T) {
			local := forward(t, d.dialer, port)
			// Two connections in turn: each is its own stream pair, and the
			// client's half-close reaches the pod's server as the end of input.
			for _, msg := range []string{"hello rig", "second connection"} {
				c, err := net.Dial("tcp", local)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(c, msg); err != nil {
					t.Fatal(err)
				}
				_ = c.(*net.TCPConn).CloseWrite()
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				got, err := io.ReadAll(c)
				_ = c.Close()
				if err != nil || string(got) != strings.ToUpper(msg) {
					t.Fatalf("through the forward: %q, %v; want %q", got, err, strings.ToUpper(msg))
				}
			}
		})
	}
}

// forward starts a port-forward to the pod's port and returns the local address.
func forward(t *testing.T, dialer httpstream.Dialer, port int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var errOut strings.Builder
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	t.Cleanup(func() {
		cancel()
		<-failed
	})
	select {
	case <-ready:
	case err := <-failed:
		t.Fatalf("port-forward: %v %s", err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward never became ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
}
