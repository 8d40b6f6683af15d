// Package progress patches a running attempt's progress into its AgentRun's
// status (loop-contract.md, "Progress"): the JSON merge patch
// contract.Progress.Patch on the status subresource, at most every
// contract.ProgressInterval, sent off the loop's goroutine so a slow API
// server never slows a turn. It uses client-go only: the loop never imports
// the operator's API types or controller-runtime.
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

// Patcher publishes the newest progress at most every interval.
type Patcher struct {
	patch    PatchFunc
	interval time.Duration
	logf     func(string, ...any)

	mu      sync.Mutex
	pending *contract.Progress
	last    time.Time
	wake    chan struct{}
	done    chan struct{}
	stopped bool
}

// NewInCluster builds a patcher for namespace/name with the pod's service
// account: the in-cluster config, or the kubeconfig KUBECONFIG names (how
// rignode hands a pod its service-account credentials on hosts without
// containers).
func NewInCluster(run string, logf func(string, ...any)) (*Patcher, error) {
	dc, ns, name, err := podClient(run)
	if err != nil {
		return nil, err
	}
	return New(DynamicPatch(dc, ns, name), contract.ProgressInterval, logf), nil
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

// DynamicRead reads one run through a dynamic client.
func DynamicRead(dc dynamic.Interface, ns, name string) ReadFunc {
	return func(ctx context.Context) ([]byte, error) {
		u, err := dc.Resource(AgentRuns).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
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

// New starts a patcher.
func New(patch PatchFunc, interval time.Duration, logf func(string, ...any)) *Patcher {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := &Patcher{patch: patch, interval: interval, logf: logf, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.run()
	return p
}

// Report queues the newest progress; older unsent progress is replaced.
func (p *Patcher) Report(pr contract.Progress) {
	p.mu.Lock()
	p.pending = &pr
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Close sends what is pending and stops, waiting at most ctx.
func (p *Patcher) Close(ctx context.Context) {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.wake)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

func (p *Patcher) run() {
	defer close(p.done)
	for range p.wake {
		p.mu.Lock()
		wait := p.interval - time.Since(p.last)
		stopped := p.stopped
		p.mu.Unlock()
		if wait > 0 && !stopped {
			time.Sleep(wait)
		}
		p.send()
	}
	p.send()
}

func (p *Patcher) send() {
	p.mu.Lock()
	pr := p.pending
	p.pending = nil
	p.mu.Unlock()
	if pr == nil {
		return
	}
	body := pr.Patch()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.patch(ctx, body); err != nil {
		p.logf("patch progress: %v", err)
	}
	p.mu.Lock()
	p.last = time.Now()
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
