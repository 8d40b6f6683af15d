package rignode

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// One phone, one process, at the node too. A rig's state lives in a host
// directory (a hostPath volume, or a claim bound to a host path) that the
// rig's attempt pods mount. The operator frees a rig only once its pod has
// ended, but a pod can end in the API — deleted, force-deleted by a user,
// deleted while its node was cut off — while its process still runs here.
// So before rignode starts a process of a pod that mounts such a directory
// read-write, no process of another pod that mounts it may be alive: a
// process of a deleted pod is stopped (SIGTERM, grace, SIGKILL) and the
// start waits until it is confirmed gone; a pod still in the API that holds
// the directory is waited for.

// exclusivePaths are the host directories pod mounts read-write from
// hostPath volumes and host-backed claims, sorted.
func exclusivePaths(pod *corev1.Pod, vs *volumeSet) []string {
	host := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || v.PersistentVolumeClaim != nil {
			host[v.Name] = true
		}
	}
	set := map[string]bool{}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if host[m.Name] && !m.ReadOnly {
				set[filepath.Clean(vs.paths[m.Name])] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// holds reports whether the pod's claim on its exclusive paths stands: a
// process of it runs, or it has started and has not ended and is not deleted
// (between two containers, or waiting to restart one).
func (r *podRun) holds() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	begun := false
	for _, c := range r.containers() {
		if c.proc != nil {
			return true
		}
		begun = begun || c.runs > 0
	}
	return begun && !r.deleted && !r.ended()
}

// holderOf is another pod that holds one of r's exclusive paths, and that path.
func (p *Provider) holderOf(r *podRun) (*podRun, string) {
	if len(r.exclusive) == 0 {
		return nil, ""
	}
	p.mu.Lock()
	others := make([]*podRun, 0, len(p.pods)+len(p.gone))
	for _, o := range p.pods {
		others = append(others, o)
	}
	for _, o := range p.gone {
		others = append(others, o)
	}
	p.mu.Unlock()
	for _, o := range others {
		if o == r || o.pod.UID == r.pod.UID {
			continue
		}
		if path := sharedPath(r.exclusive, o.exclusive); path != "" && o.holds() {
			return o, path
		}
	}
	return nil, ""
}

func sharedPath(a, b []string) string {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return x
			}
		}
	}
	return ""
}

// exclusiveWait is how often a waiting start looks again.
const exclusiveWait = 200 * time.Millisecond

// startExclusive starts c once no other pod holds one of r's exclusive
// paths. It reports false when r was stopped while it waited; err is why the
// process could not start (recorded in c's status).
func (p *Provider) startExclusive(r *podRun, c *container) (started bool, err error) {
	waiting := ""
	for {
		// p.excl makes look-and-start one step: two pods of one rig never
		// both find the path free.
		p.excl.Lock()
		holder, path := p.holderOf(r)
		if holder == nil {
			r.mu.Lock()
			if r.stopping() {
				r.mu.Unlock()
				p.excl.Unlock()
				return false, nil
			}
			if err = c.start(&p.cfg); err != nil {
				c.startFailed(err)
			}
			r.refreshStatus()
			r.mu.Unlock()
			p.excl.Unlock()
			r.publish()
			if waiting != "" {
				p.cfg.Logf("pod %s/%s: %s has ended; starting container %s", r.pod.Namespace, r.pod.Name, waiting, c.spec.Name)
			}
			return true, err
		}
		p.excl.Unlock()
		if w := fmt.Sprintf("pod %s/%s (%s)", holder.pod.Namespace, holder.pod.Name, holder.pod.UID); w != waiting {
			waiting = w
			msg := fmt.Sprintf("waiting for the process of %s, which uses %s, to end: one pod at a time may use a rig's host directory", w, path)
			p.cfg.Logf("pod %s/%s: %s", r.pod.Namespace, r.pod.Name, msg)
			r.mu.Lock()
			c.waiting("ContainerCreating", msg)
			r.refreshStatus()
			r.mu.Unlock()
			r.publish()
		}
		select {
		case <-r.stop:
			return false, nil
		case <-time.After(exclusiveWait):
		}
	}
}
