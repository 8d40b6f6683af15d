package rignode

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
)

// PortForward as virtual-kubelet calls it, with one end of a pipe as the
// client's stream, against servers listening on the host.
func TestPortForwardCopiesBothWaysUntilOneSideCloses(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t)
	pod := shPod("server", "sleep 60", corev1.RestartPolicyNever)
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.DeletePod(context.Background(), pod) })

	// An echo server: the client closing its side ends the forward.
	echo := listen(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
	client, stream := net.Pipe()
	done := forwardAsync(p, "server", echo, stream)
	if _, err := io.WriteString(client, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	_ = client.Close()
	if err := waitErr(t, done); err != nil {
		t.Fatalf("the client closed: PortForward returned %v, want nil", err)
	}

	// A server that speaks first and hangs up: the client reads it all, then EOF.
	hello := listen(t, func(c net.Conn) { _, _ = io.WriteString(c, "hello from the pod") })
	client, stream = net.Pipe()
	done = forwardAsync(p, "server", hello, stream)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "hello from the pod" {
		t.Fatalf("read %q, %v; want the server's words, then EOF", got, err)
	}
	if err := waitErr(t, done); err != nil {
		t.Fatalf("the pod's server closed: PortForward returned %v, want nil", err)
	}
}

func TestPortForwardRefusals(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t)
	pod := shPod("server", "sleep 60", corev1.RestartPolicyNever)
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.DeletePod(context.Background(), pod) })
	// Port 1 (tcpmux) is outside the ephemeral range, so no client's socket
	// answers it as a closed listener's freed port might.
	const closed = 1
	if c, err := net.Dial("tcp", "127.0.0.1:1"); err == nil {
		_ = c.Close()
		t.Skip("something listens on 127.0.0.1:1")
	}

	for _, c := range []struct {
		what, pod string
		port      int32
		want      func(error) bool
		says      string
	}{
		{"a pod this node does not run", "other", closed, errdefs.IsNotFound, "not running on this node"},
		{"a port out of range", "server", 70000, errdefs.IsInvalidInput, "not a TCP port"},
		{"a port nothing listens on", "server", closed, func(err error) bool { return err != nil }, "nothing accepts connections on port"},
	} {
		_, stream := net.Pipe()
		err := p.PortForward(context.Background(), "ns", c.pod, c.port, stream)
		if !c.want(err) || !strings.Contains(fmtErr(err), c.says) {
			t.Errorf("%s: %v, want an error saying %q", c.what, err, c.says)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// listen serves each connection with serve (then closes it) on a loopback
// port and returns the port.
func listen(t *testing.T, serve func(net.Conn)) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return port
}

func forwardAsync(p *Provider, pod string, port int32, stream io.ReadWriteCloser) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.PortForward(context.Background(), "ns", pod, port, stream) }()
	return done
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("PortForward did not return")
		return nil
	}
}
