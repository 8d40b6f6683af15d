package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// The loop reads its run at every turn boundary and hands the model the
// steer messages after those its opening message carried (--steered), in
// order, each once; a read that fails is retried at the next turn and does
// not end the session.
func TestLoopDeliversSteerMessagesFromItsRun(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	newRunReader = func(run string) (progress.ReadFunc, error) {
		if run != "ns/run-1" {
			t.Errorf("reader for %q", run)
		}
		return func(context.Context) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			switch reads {
			case 1:
				return nil, errors.New("the API server is away")
			case 2:
				return []byte(`{"status":{"joined":[{"name":"c1","mode":"collect","trigger":"collected task"},` +
					`{"name":"s1","mode":"steer","trigger":"old steer"}]}}`), nil
			}
			return []byte(`{"status":{"joined":[{"name":"c1","mode":"collect","trigger":"collected task"},` +
				`{"name":"s1","mode":"steer","trigger":"old steer"},{"name":"s2","mode":"steer","trigger":"also check the battery"}]}}`), nil
		}, nil
	}
	defer func() { newRunReader = progress.NewInClusterReader }()

	model := pt.OpenAI(uniq(step(note, peek), step(note, peek), step(note, peek), closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	code, b, m, stderr, err := runInProcess(loopEnv(t, model.URL, r1.Endpoint(), "CLAWFARM_STEERED=1"))
	if code != 0 || err != nil {
		t.Fatalf("exit %d message %s (%v) stderr %s", code, b, err, stderr)
	}
	if !strings.Contains(stderr, "reading the run for steer messages: the API server is away") {
		t.Errorf("the failed read was not logged: %s", stderr)
	}
	for i := 0; i < model.Requests(); i++ {
		body := string(model.Body(i))
		has := strings.Contains(body, "New instruction from run s2") && strings.Contains(body, "also check the battery")
		if has != (i >= 2) {
			t.Errorf("request %d carries s2's message: %v, want it from request 2 on (read 3 is the first to show it)", i, has)
		}
		if strings.Contains(body, "New instruction from run s1") || strings.Contains(body, "New instruction from run c1") {
			t.Errorf("request %d delivers a message the opening message already carried", i)
		}
		if n := strings.Count(body, "New instruction from run s2"); n > 1 {
			t.Errorf("request %d delivers s2's message %d times", i, n)
		}
	}
	if m.Steered != 2 {
		t.Errorf("the termination message counts %d steer messages, want 2", m.Steered)
	}
	if reads != model.Requests() {
		t.Errorf("the run was read %d times for %d requests: once per turn boundary", reads, model.Requests())
	}
}

// The setting: policies that may ask for approval get an approver reading
// the run; policies that cannot, or no run, get none; a bad set is a
// configuration error naming the rule.
func TestToolPoliciesFor(t *testing.T) {
	old := newRunReader
	newRunReader = func(string) (progress.ReadFunc, error) {
		return func(context.Context) ([]byte, error) { return []byte(`{"metadata":{"annotations":{}}}`), nil }, nil
	}
	defer func() { newRunReader = old }()
	set := func(action toolpolicy.Action) string {
		s, _ := toolpolicy.Set{Policies: []toolpolicy.Policy{{Name: "p", Rules: []toolpolicy.Rule{{Name: "r", Expression: "true", Action: action}}}}}.Encode()
		return s
	}
	c := config{}
	c.Run, c.ToolPolicies = "farm/run", set(toolpolicy.Approve)
	if _, ap, err := toolPoliciesFor(c, engine.RealClock{}, t.Logf); err != nil || ap == nil {
		t.Errorf("Approve rules: approver %v, err %v", ap, err)
	}
	c.ToolPolicies = set(toolpolicy.Block)
	if _, ap, err := toolPoliciesFor(c, engine.RealClock{}, t.Logf); err != nil || ap != nil {
		t.Errorf("Block rules only: approver %v, err %v", ap, err)
	}
	c.ToolPolicies = `{"policies":[{"name":"p","rules":[{"name":"r","expression":"tool ==","action":"Block"}]}]}`
	if _, _, err := toolPoliciesFor(c, engine.RealClock{}, t.Logf); err == nil {
		t.Error("a rule that does not compile was accepted")
	}
}
