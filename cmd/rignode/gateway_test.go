package main

import (
	"context"
	"testing"
)

// `rignode gateway` refuses to start without rigs to front, or with a rig
// it cannot read, before it reaches for the API server.
func TestGatewayRefusesBadRigs(t *testing.T) {
	for _, args := range [][]string{
		{"--kubeconfig=/nonexistent"},
		{"--kubeconfig=/nonexistent", "--rig=rig-0=http://127.0.0.1:8048"},
		{"--kubeconfig=/nonexistent", "--rig=farm/rig-0=http://u:p@127.0.0.1:8048"},
		{"--no-such-flag"},
	} {
		if code := gateway(context.Background(), args); code != 2 {
			t.Errorf("rignode gateway %q exited %d, want 2", args, code)
		}
	}
	if code := gateway(context.Background(), []string{"--kubeconfig=/nonexistent", "--rig=farm/rig-0=http://127.0.0.1:8048"}); code != 2 {
		t.Errorf("a kubeconfig that is not there: exit %d, want 2", code)
	}
}
