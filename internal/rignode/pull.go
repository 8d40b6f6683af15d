package rignode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/clock"
)

// ensureImage makes c's image ready before its process first starts: pulled
// (as its pull policy says) and unpacked, the process worked out from it. A
// pull that fails is retried with a growing back-off, the container waiting
// ErrImagePull and then ImagePullBackOff, with the registry's message, as a
// kubelet reports it; the pod's stop ends the wait (false).
func (r *podRun) ensureImage(c *container) bool {
	r.mu.Lock()
	ready, pod := c.argv != nil, r.pod
	r.mu.Unlock()
	if ready {
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	report := func(reason, msg string) {
		r.mu.Lock()
		c.waiting(reason, msg)
		r.refreshStatus()
		r.mu.Unlock()
		r.publish()
	}
	if allowed := r.p.cfg.AllowedImages; len(allowed) > 0 && !hasAnyPrefix(c.spec.Image, allowed) {
		// Refused for good: the operator reads "denied" as a configuration error.
		report(ReasonErrImagePull, fmt.Sprintf("pull access denied for %q: this node runs only images under %s (rignode --allowed-images)",
			c.spec.Image, strings.Join(allowed, ", ")))
		<-ctx.Done()
		return false
	}
	backoff := r.p.cfg.ImagePullBackoff
	for {
		root, err := r.p.images.get(ctx, c.spec.Image, c.spec.ImagePullPolicy, keychainOf(ctx, r.p, pod))
		if err == nil {
			r.mu.Lock()
			err = c.prepare(r, imageSource{root: root})
			r.mu.Unlock()
			if err == nil {
				return true
			}
			// The image cannot run as the pod asks: only a new pod can fix it.
			report("CreateContainerError", err.Error())
			<-ctx.Done()
			return false
		}
		if ctx.Err() != nil {
			return false
		}
		reason := ReasonErrImagePull
		var pe *imagePullError
		if errors.As(err, &pe) {
			reason = pe.reason
		}
		r.p.cfg.Logf("pod %s/%s: container %s: %v", pod.Namespace, pod.Name, c.spec.Name, err)
		report(reason, err.Error())
		if reason == ReasonInvalidImageName {
			<-ctx.Done()
			return false
		}
		shown := min(backoff, 2*time.Second)
		if clock.Sleep(ctx, shown) != nil {
			return false
		}
		if reason == ReasonErrImagePull {
			report(ReasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q: %s: %v", c.spec.Image, ReasonErrImagePull, err))
		}
		if clock.Sleep(ctx, backoff-shown) != nil {
			return false
		}
		backoff = min(2*backoff, maxImagePullBackoff)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
