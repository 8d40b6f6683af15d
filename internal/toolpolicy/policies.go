package toolpolicy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// maxObservers bounds the observe-only webhook calls in flight; past it a
// call is dropped and logged rather than holding up the session.
const maxObservers = 8

// Policies is a compiled Set: what the loop asks before every call.
type Policies struct {
	set      []compiledPolicy
	webhooks [][]*webhookClient // per policy, in order
	run      string
	attempt  int
	logf     func(string, ...any)

	observers chan struct{}
	wg        sync.WaitGroup
}

// Compile checks and compiles a set: every rule's CEL, every webhook's URL,
// CA bundle and failure policy. The error names each policy and rule that
// is wrong.
func Compile(set Set) (*Policies, error) {
	rules, err := compileRules(set)
	errs := []error{err}
	p := &Policies{set: rules, observers: make(chan struct{}, maxObservers), logf: func(string, ...any) {}}
	for _, pol := range set.Policies {
		var hooks []*webhookClient
		for _, w := range pol.Webhooks {
			c, err := newWebhookClient(pol.Name, w)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			hooks = append(hooks, c)
		}
		p.webhooks = append(p.webhooks, hooks)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Bind names the session the webhooks are told about, and where to log.
func (p *Policies) Bind(run string, attempt int, logf func(string, ...any)) {
	p.run, p.attempt = run, attempt
	if logf != nil {
		p.logf = logf
	}
}

// Empty reports whether the set has neither rules nor webhooks.
func (p *Policies) Empty() bool {
	for i, pol := range p.set {
		if len(pol.rules) > 0 || len(p.webhooks[i]) > 0 {
			return false
		}
	}
	return true
}

// Before decides a call: the rules, then (unless a rule blocked) the
// BeforeToolCall webhooks in order, the strongest decision winning. A
// webhook that fails follows its failure policy: Fail blocks, saying why;
// Ignore lets the call run and logs it.
func (p *Policies) Before(ctx context.Context, turn int, c Call) Decision {
	best := decideRules(p.set, c)
	if best.Blocked() {
		return best
	}
	for i, hooks := range p.webhooks {
		for _, w := range hooks {
			if !w.on(EventBeforeToolCall) || !forTool(w.Tools, c.Tool) {
				continue
			}
			d := Decision{Policy: w.policy, Rule: "webhook:" + w.Name,
				ApprovalTimeout: time.Duration(p.set[i].ApprovalTimeout()) * time.Second}
			r, err := w.call(ctx, ReviewRequest{Event: EventBeforeToolCall, Run: p.run, Attempt: p.attempt, Turn: turn,
				Tool: c.Tool, Args: c.Args, Screen: c.Screen})
			switch {
			case err != nil && w.failClosed():
				d.Action = Block
				d.Message = fmt.Sprintf("ToolPolicy %s webhook %s failed (%v) and its failurePolicy is Fail, so the call is blocked", w.policy, w.Name, err)
			case err != nil:
				p.logf("ToolPolicy %s webhook %s failed (%v); failurePolicy Ignore: the call runs", w.policy, w.Name, err)
				continue
			default:
				d.Action, d.Message = r.Action, r.Message
			}
			if d.Action.strength() > best.Action.strength() {
				best = d
			}
			if best.Blocked() {
				return best
			}
		}
	}
	return best
}

// Rules decides a call by the rules alone, asking no webhook: what the rig
// gateway re-checks (internal/riggate), where a webhook would be asked twice.
func (p *Policies) Rules(c Call) Decision { return decideRules(p.set, c) }

// After tells the AfterToolCall webhooks what a call returned, off the
// session's path: their answers are not read.
func (p *Policies) After(turn int, c Call, result string, isError bool) {
	p.observe(EventAfterToolCall, c.Tool, ReviewRequest{Event: EventAfterToolCall, Run: p.run, Attempt: p.attempt, Turn: turn,
		Tool: c.Tool, Args: c.Args, Result: result, ResultIsError: isError})
}

// End tells the SessionEnd webhooks how the session ended and waits, each
// within its own timeout, for every observe-only call still in flight.
func (p *Policies) End(sentinel, recap string) {
	p.observe(EventSessionEnd, "", ReviewRequest{Event: EventSessionEnd, Run: p.run, Attempt: p.attempt, Sentinel: sentinel, Recap: recap})
	p.wg.Wait()
}

func (p *Policies) observe(event, tool string, req ReviewRequest) {
	for _, hooks := range p.webhooks {
		for _, w := range hooks {
			if !w.on(event) || (tool != "" && !forTool(w.Tools, tool)) {
				continue
			}
			select {
			case p.observers <- struct{}{}:
			default:
				p.logf("ToolPolicy %s webhook %s: %d calls already in flight; this %s is not sent", w.policy, w.Name, maxObservers, event)
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.observers }()
				if _, err := w.call(context.Background(), req); err != nil {
					p.logf("ToolPolicy %s webhook %s (%s): %v", w.policy, w.Name, event, err)
				}
			}()
		}
	}
}
