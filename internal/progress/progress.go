// Package progress patches a running attempt's progress into its AgentRun's
// status (loop-contract.md, "Progress"): the JSON merge patch
// contract.Progress.Patch on the status subresource, sent off the loop's
// goroutine so a slow API server never slows a turn. News — an attempt's
// first progress, an approval asked or answered, a steer delivered — goes
// at most every contract.ProgressInterval; the rest (turn, tokens, the last
// tool and note, the heartbeat) at most every heartbeat interval, which the
// operator sets from the stall watchdog (contract.ProgressHeartbeatFor): a
// session writes to the API server a few times a minute, not every turn.
// It uses client-go only: the loop never imports the operator's API types
// or controller-runtime.
package progress

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// AgentRuns is the AgentRun resource.
var AgentRuns = schema.GroupVersionResource{Group: "farm.clawfarm.dev", Version: "v1alpha1", Resource: "agentruns"}

// PatchFunc sends one merge patch to the run's status.
type PatchFunc func(ctx context.Context, patch []byte) error

// Patcher publishes the newest progress: news at most every news interval,
// the rest at most every heartbeat interval.
type Patcher struct {
	patch           PatchFunc
	news, heartbeat time.Duration
	logf            func(string, ...any)

	mu      sync.Mutex
	pending *contract.Progress
	sent    *contract.Progress // the last progress the API server took
	last    time.Time          // when the last patch was answered
	wake    chan struct{}
	done    chan struct{}
	stopped bool
}

// NewInCluster builds a patcher for namespace/name with the pod's service
// account: the in-cluster config, or the kubeconfig KUBECONFIG names (how
// rignode hands a pod its service-account credentials on hosts without
// containers).
func NewInCluster(run string, heartbeat time.Duration, logf func(string, ...any)) (*Patcher, error) {
	dc, ns, name, err := podClient(run)
	if err != nil {
		return nil, err
	}
	return New(DynamicPatch(dc, ns, name), contract.ProgressInterval, heartbeat, logf), nil
}

// NewInClusterReader reads namespace/name with the pod's service account
// (the loop's role may get runs): steer messages and approval answers reach
// a running loop through its own run object.
func NewInClusterReader(run string) (ReadFunc, error) {
	dc, ns, name, err := podClient(run)
	if err != nil {
		return nil, err
	}
	return DynamicRead(dc, ns, name), nil
}

// podClient is a dynamic client with the pod's credentials, and the run's
// namespace and name.
func podClient(run string) (dc dynamic.Interface, ns, name string, err error) {
	if ns, name, err = contract.ParseRunRef(run); err != nil {
		return nil, "", "", err
	}
	cfg, err := podConfig()
	if err != nil {
		return nil, "", "", err
	}
	if dc, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, "", "", fmt.Errorf("the run's API client: %w", err)
	}
	return dc, ns, name, nil
}

// ReadFunc returns the run object as JSON.
type ReadFunc func(ctx context.Context) ([]byte, error)

// DynamicRead reads one run through a dynamic client, from the API server's
// watch cache (resourceVersion 0): the loop reads its run at every turn
// boundary for steer messages and every contract.ApprovalPoll for an
// answer, and a copy a moment old only delays either to the next read,
// where a quorum read would cost etcd a round trip each time.
func DynamicRead(dc dynamic.Interface, ns, name string) ReadFunc {
	return func(ctx context.Context) ([]byte, error) {
		u, err := dc.Resource(AgentRuns).Namespace(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return nil, err
		}
		return u.MarshalJSON()
	}
}

// DynamicPatch patches agentruns/status of one run through a dynamic client.
func DynamicPatch(dc dynamic.Interface, ns, name string) PatchFunc {
	return func(ctx context.Context, patch []byte) error {
		_, err := dc.Resource(AgentRuns).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	}
}

// New starts a patcher that sends news at most every news and the rest at
// most every heartbeat (never more often than news).
func New(patch PatchFunc, news, heartbeat time.Duration, logf func(string, ...any)) *Patcher {
	p := newPatcher(patch, news, heartbeat, logf)
	go p.run()
	return p
}

func newPatcher(patch PatchFunc, news, heartbeat time.Duration, logf func(string, ...any)) *Patcher {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Patcher{patch: patch, news: news, heartbeat: max(news, heartbeat), logf: logf,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Report queues the newest progress; older unsent progress is replaced.
// Progress reported after Close is dropped.
func (p *Patcher) Report(pr contract.Progress) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.pending = &pr
	p.mu.Unlock()
	p.poke()
}

// Close sends what is pending and stops, waiting at most ctx.
func (p *Patcher) Close(ctx context.Context) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.poke()
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

func (p *Patcher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// IsNews says whether progress p says something that sent did not which
// someone acts on: another attempt, an approval asked or answered, a steer
// delivered. The turn, the tokens, the last tool and note and the heartbeat
// are not: the stall watchdog needs only a heartbeat well within its
// timeout, and a person watching the run sees them at the next one.
func IsNews(sent, p contract.Progress) bool {
	if sent.Attempt != p.Attempt || sent.Steered != p.Steered {
		return true
	}
	switch a, b := sent.Approval, p.Approval; {
	case a == nil || b == nil:
		return a != b
	default:
		return *a != *b
	}
}

// next takes the pending progress if it is due at now (all of it once the
// patcher is stopped); otherwise it returns nil and when it will be (zero:
// nothing is pending). p.mu is held.
func (p *Patcher) next(now time.Time) (*contract.Progress, time.Time) {
	if p.pending == nil {
		return nil, time.Time{}
	}
	gap := p.heartbeat
	if p.sent == nil || IsNews(*p.sent, *p.pending) {
		gap = p.news
	}
	if at := p.last.Add(gap); !p.stopped && now.Before(at) {
		return nil, at
	}
	pr := p.pending
	p.pending = nil
	return pr, time.Time{}
}

// sentAt records the answer to the patch of pr at now. A patch that failed is
// tried again with the next one due, unless newer progress replaced it.
func (p *Patcher) sentAt(pr *contract.Progress, now time.Time, err error) {
	p.last = now
	switch {
	case err == nil:
		p.sent = pr
	case p.pending == nil && !p.stopped:
		p.pending = pr
	}
}

func (p *Patcher) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		pr, at := p.next(time.Now())
		stopped := p.stopped
		p.mu.Unlock()
		if pr != nil {
			p.send(pr)
			continue
		}
		if stopped {
			return
		}
		var due <-chan time.Time
		var timer *time.Timer
		if !at.IsZero() {
			timer = time.NewTimer(time.Until(at))
			due = timer.C
		}
		select {
		case <-p.wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (p *Patcher) send(pr *contract.Progress) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.patch(ctx, pr.Patch())
	if err != nil {
		p.logf("patch progress: %v", err)
	}
	p.mu.Lock()
	p.sentAt(pr, time.Now(), err)
	p.mu.Unlock()
}

func podConfig() (*rest.Config, error) {
	if path := os.Getenv("KUBECONFIG"); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("progress patching: the kubeconfig in KUBECONFIG (%s): %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("progress patching needs the in-cluster config or KUBECONFIG: %w", err)
	}
	return cfg, nil
}
