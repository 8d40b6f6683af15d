package rignode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
)

// Port-forward timings.
const (
	// portDialTimeout bounds one dial of a pod's port.
	portDialTimeout = 5 * time.Second
	// portCloseGrace is how long the other direction may still finish after
	// one side has closed (containerd's, after socat's -t).
	portCloseGrace = time.Second
)

// PortForward connects stream, one connection of `kubectl port-forward`
// that virtual-kubelet's kubelet API has accepted, to the pod's port.
// rignode's pods share the host network, so the pod's port is the host's:
// it is dialled on loopback first, as a kubelet's runtime dials localhost
// inside the pod's network namespace, then at the node's address (the
// pod's IP) for a server that listens only there. As on a kubelet, the port
// need not be declared in the pod's spec. Bytes flow both ways until one
// side closes.
func (p *Provider) PortForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	r := p.get(namespace, name)
	if r == nil {
		return errdefs.NotFoundf("pod %s/%s is not running on this node", namespace, name)
	}
	if r.ended() {
		return errdefs.InvalidInputf("pod %s/%s has ended: its processes are gone", namespace, name)
	}
	if port <= 0 || port > 65535 {
		return errdefs.InvalidInputf("port %d is not a TCP port (1-65535)", port)
	}
	conn, err := p.dialPod(ctx, port)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	defer conn.Close()
	return splice(ctx, conn, stream)
}

// podAddresses are where a pod's port is dialled, in order.
func (p *Provider) podAddresses() []string {
	addrs := []string{"127.0.0.1", "::1"}
	if ip := net.ParseIP(p.cfg.NodeIP); ip != nil && !ip.IsLoopback() {
		addrs = append(addrs, ip.String())
	}
	return addrs
}

// dialPod connects to port at the first of the pod's addresses that answers.
func (p *Provider) dialPod(ctx context.Context, port int32) (net.Conn, error) {
	d := net.Dialer{Timeout: portDialTimeout}
	var errs []error
	for _, a := range p.podAddresses() {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a, strconv.Itoa(int(port))))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("nothing accepts connections on port %d: %w", port, errors.Join(errs...))
}

// splice copies between the pod's connection and the forwarded stream.
// Whichever side has sent all it will, the other is told so (a half-close),
// and then has portCloseGrace to finish.
func splice(ctx context.Context, conn net.Conn, stream io.ReadWriteCloser) error {
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(stream, conn)
		// The pod's side is done: the client reads the end at once (a
		// stream's Close ends only its sending half) instead of after the grace.
		_ = stream.Close()
		done <- err
	}()
	go func() {
		_, err := io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- err
	}()
	var first error
	select {
	case first = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		if first == nil {
			first = err
		}
	case <-time.After(portCloseGrace):
	case <-ctx.Done():
	}
	if errors.Is(first, net.ErrClosed) || errors.Is(first, io.ErrClosedPipe) {
		return nil
	}
	return first
}
