package rig_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

func dial(t *testing.T, r *rigtest.Rig) *rig.Client {
	c, err := rig.Dial(context.Background(), rig.Config{Endpoint: r.Endpoint(), BusyDelay: time.Millisecond,
		ReconnectWindow: 300 * time.Millisecond, ReconnectBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestToolsAndResults(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	c := dial(t, r)
	if c.Instructions() != rigtest.Instructions || len(c.Tools()) != 4 {
		t.Fatalf("instructions %q tools %d", c.Instructions(), len(c.Tools()))
	}
	res, err := c.Call(context.Background(), "peek", []byte(`{}`))
	if err != nil || res.IsError || len(res.Images) != 1 || res.Images[0].MIMEType != "image/jpeg" || !strings.Contains(res.Text, "peek done") {
		t.Fatalf("peek: %+v %v", res, err)
	}
	if len(res.Images[0].Data) != len(r.JPEG) {
		t.Errorf("image %d bytes, want %d", len(res.Images[0].Data), len(r.JPEG))
	}
	r.Busy.Store(3)
	res, err = c.Call(context.Background(), "tap", []byte(`{"bbox":[0.1,0.2,0.3,0.4]}`))
	if err != nil || res.IsError {
		t.Fatalf("busy tap not retried: %+v %v", res, err)
	}
	res, _ = c.Call(context.Background(), "no_such_tool", []byte(`{}`))
	if !res.IsError {
		t.Error("unknown tool should be an error result")
	}
}

func TestReconnect(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	c := dial(t, r)
	// The rig drops and comes back: a read-only call is re-run, a gesture is reported as uncertain.
	r.SetDown(true)
	go func() { time.Sleep(50 * time.Millisecond); r.SetDown(false) }()
	res, err := c.Call(context.Background(), "peek", []byte(`{}`))
	if err != nil || res.IsError {
		t.Fatalf("peek after reconnect: %+v %v", res, err)
	}
	r.SetDown(true)
	go func() { time.Sleep(50 * time.Millisecond); r.SetDown(false) }()
	res, err = c.Call(context.Background(), "tap", []byte(`{"bbox":[0.1,0.2,0.3,0.4]}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "may or may not have happened") {
		t.Fatalf("tap across a drop: %+v %v", res, err)
	}
	// Gone for good: ErrUnavailable.
	r.SetDown(true)
	if _, err := c.Call(context.Background(), "peek", []byte(`{}`)); !errors.Is(err, rig.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
}
