package riggate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// DefaultPublicPaths are the paths of a rig that a GET reaches without a
// token: PhysiClaw's health route, which the manager probes.
var DefaultPublicPaths = []string{"/api/status"}

// Options configure a gateway process (`rignode gateway`).
type Options struct {
	// Listen is the address the gateway serves on: the rig host's address
	// on the rig network.
	Listen string
	// Rigs are the rigs it fronts: namespace/rig → the rig's own server on
	// the host's loopback (ParseRigs).
	Rigs map[string]*url.URL
	// Public are the paths a GET or HEAD reaches without a token
	// (DefaultPublicPaths when nil).
	Public []string
	// Config reaches the API server as the gateway's identity (the rig
	// host's node, bound to the chart's rig-gateway ClusterRole).
	Config   *rest.Config
	Audience string // contract.DefaultRigAudience when empty
	Logf     func(format string, args ...any)
	// Serving is called with the address once the gateway listens.
	Serving func(addr string)
	// WatchInterval is how often a watched rig's own watch route is polled
	// while it is free (Gateway.WatchInterval; zero: wakes are not watched).
	WatchInterval time.Duration
}

// ParseRigs reads rig mappings, each "namespace/rig=URL" where URL is the
// rig's own server (http://127.0.0.1:8048 for a PhysiClaw rig); an entry
// may hold several, comma-separated.
func ParseRigs(entries []string) (map[string]*url.URL, error) {
	rigs := map[string]*url.URL{}
	for _, e := range entries {
		for _, m := range strings.Split(e, ",") {
			m = strings.TrimSpace(m)
			if m == "" {
				continue
			}
			key, raw, ok := strings.Cut(m, "=")
			ns, rig, okKey := strings.Cut(key, "/")
			if !ok || !okKey || ns == "" || rig == "" || strings.Contains(rig, "/") {
				return nil, fmt.Errorf("rig %q: want namespace/rig=URL, e.g. farm/rig-0=http://127.0.0.1:8048", m)
			}
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("rig %s: %q is not an http(s) URL of the rig's own server", key, raw)
			}
			if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				return nil, fmt.Errorf("rig %s: %q: the rig's URL carries no credentials, query or fragment", key, raw)
			}
			if _, dup := rigs[key]; dup {
				return nil, fmt.Errorf("rig %s is named twice", key)
			}
			rigs[key] = u
		}
	}
	if len(rigs) == 0 {
		return nil, errors.New("no rig to front: name each as namespace/rig=URL")
	}
	return rigs, nil
}

// Serve runs a gateway in front of o.Rigs until ctx ends. It watches the
// rigs' Leases and the attempt pods of their namespaces, to cut a session
// the moment its Lease moves or its pod is deleted, and their AgentRuns,
// for the approvals the ToolPolicies ask (guard.go). It serves at once: the
// public health route needs no watch, and a call waits for them to be in sync.
func Serve(ctx context.Context, o Options) error {
	if o.Audience == "" {
		o.Audience = contract.DefaultRigAudience
	}
	if o.Public == nil {
		o.Public = DefaultPublicPaths
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	namespaces := map[string]cache.Config{}
	for key := range o.Rigs {
		ns, _, _ := strings.Cut(key, "/")
		namespaces[ns] = cache.Config{}
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := farmv1.AddToScheme(scheme); err != nil {
		return err
	}
	attempts := labels.SelectorFromSet(labels.Set{farmv1.LabelKind: "attempt"})
	objects, err := cache.New(o.Config, cache.Options{Scheme: scheme, DefaultNamespaces: namespaces,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: attempts}}})
	if err != nil {
		return fmt.Errorf("watch the rigs' Leases and pods: %w", err)
	}
	live, err := client.New(o.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return err
	}
	g := &Gateway{
		Upstream: func(ns, rig string) (*url.URL, bool) {
			u, ok := o.Rigs[rigKey(ns, rig)]
			return u, ok
		},
		Auth:   &KubeAuthority{Client: cs, Pods: objects, Live: live, Audience: o.Audience},
		Leases: objects,
		Runs:   objects,
		Public: o.Public,
		Logf:   logf,

		WatchInterval: o.WatchInterval,
	}
	leases, err := objects.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	if _, err := leases.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				g.LeaseChanged(l.Namespace, l.Name, l)
			}
		},
		DeleteFunc: func(obj any) {
			if l, ok := tombstone(obj).(*coordinationv1.Lease); ok {
				g.LeaseChanged(l.Namespace, l.Name, nil)
			}
		},
	}); err != nil {
		return err
	}
	pods, err := objects.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				g.PodGone(p.Namespace, p.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := tombstone(obj).(*corev1.Pod); ok {
				g.PodGone(p.Namespace, p.Name)
			}
		},
	}); err != nil {
		return err
	}

	runs, err := objects.GetInformer(ctx, &farmv1.AgentRun{})
	if err != nil {
		return err
	}
	if _, err := runs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { noteRun(g, obj) },
		UpdateFunc: func(_, obj any) { noteRun(g, obj) },
		DeleteFunc: func(obj any) {
			if r, ok := tombstone(obj).(*farmv1.AgentRun); ok {
				g.ForgetRun(r.UID)
			}
		},
	}); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- objects.Start(ctx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	keys := make([]string, 0, len(o.Rigs))
	for k := range o.Rigs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	logf("rig gateway on %s in front of %s", ln.Addr(), strings.Join(keys, ", "))
	if o.Serving != nil {
		o.Serving(ln.Addr().String())
	}
	go func() {
		if objects.WaitForCacheSync(ctx) {
			logf("rig gateway: watching the rigs' Leases and attempt pods")
			g.RunWatches(ctx) // a rig's wakes are polled only while its Lease is known free
		}
	}()
	select {
	case <-ctx.Done():
	case err = <-served:
		return fmt.Errorf("gateway: %w", err)
	case err = <-cacheDone:
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("gateway: watch: %w", err)
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	// Streams run until their client goes: close what shutdown leaves.
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

func noteRun(g *Gateway, obj any) {
	if r, ok := obj.(*farmv1.AgentRun); ok {
		g.NoteRun(r)
	}
}

// tombstone is the object a delete event names: the last state the watch
// saw, when it missed the deletion itself.
func tombstone(obj any) any {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}
