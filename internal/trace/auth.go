package trace

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// DefaultAudience is the audience of the projected token a loop pod
// presents; a token for the API server (or any other audience) is refused.
const DefaultAudience = contract.DefaultTraceAudience

// Extra keys the API server puts in a pod-bound token's user info.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// ErrUnauthenticated is a token the API server does not accept; ErrForbidden
// is a caller it accepts that may not do what it asked.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Writer is the attempt a loop pod's token names: the only trace it may write.
type Writer struct {
	Namespace, Run string
	RunUID         types.UID
	Attempt        int
	Pod            string
	PodUID         types.UID
}

// Reader is a person (or program) reading traces.
type Reader struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string]authzv1.ExtraValue
	// Attempt is set when the token is bound to a loop's attempt pod: it
	// reads that attempt's trace and nothing else, whatever its RBAC (the
	// loop may get every run of its namespace, to read its own).
	Attempt *Writer
}

// Authority decides who is calling and what they may read.
type Authority interface {
	// Writer authenticates a loop pod's projected token.
	Writer(ctx context.Context, token string) (*Writer, error)
	// Reader authenticates a reader's token.
	Reader(ctx context.Context, token string) (*Reader, error)
	// Can says whether the reader may verb (get, list) agentruns in the namespace.
	Can(ctx context.Context, r *Reader, verb, namespace string) (bool, error)
}

// KubeAuthority asks the API server: a TokenReview for who is calling, the
// pod a loop's token is bound to for what it may write, and a
// SubjectAccessReview for what a reader may read. Answers are kept for TTL,
// so a session's uploads and a page's requests cost one review each.
type KubeAuthority struct {
	Client   kubernetes.Interface
	Audience string
	TTL      time.Duration
	Now      func() time.Time
	// Pods, when set, is read on every write (a watch-fed cache in
	// clawfarm-server): a writer whose pod is gone, or was replaced, is
	// refused at once rather than when its cached answer expires.
	Pods client.Reader

	mu      sync.Mutex
	writers map[[32]byte]cached[*Writer]
	readers map[[32]byte]cached[*Reader]
	access  map[string]cached[bool]
}

type cached[T any] struct {
	v       T
	expires time.Time
}

// NewKubeAuthority asks the API server through cs.
func NewKubeAuthority(cs kubernetes.Interface, audience string) *KubeAuthority {
	if audience == "" {
		audience = DefaultAudience
	}
	return &KubeAuthority{Client: cs, Audience: audience, TTL: time.Minute, Now: time.Now,
		writers: map[[32]byte]cached[*Writer]{}, readers: map[[32]byte]cached[*Reader]{}, access: map[string]cached[bool]{}}
}

// maxCached bounds each cache; past it, expired answers are dropped first
// and the whole cache if that is not enough.
const maxCached = 4096

func lookup[K comparable, T any](a *KubeAuthority, m map[K]cached[T], k K) (T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := m[k]
	if !ok || a.Now().After(c.expires) {
		var zero T
		return zero, false
	}
	return c.v, true
}

func store[K comparable, T any](a *KubeAuthority, m map[K]cached[T], k K, v T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Now()
	if len(m) >= maxCached {
		for key, c := range m {
			if now.After(c.expires) {
				delete(m, key)
			}
		}
		if len(m) >= maxCached {
			clear(m)
		}
	}
	m[k] = cached[T]{v: v, expires: now.Add(a.TTL)}
}

func (a *KubeAuthority) review(ctx context.Context, token string, audiences []string) (*authnv1.TokenReviewStatus, error) {
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		why := tr.Status.Error
		if why == "" {
			why = "the API server does not accept this token"
		}
		return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, why)
	}
	return &tr.Status, nil
}

// Writer accepts only a token with this server's audience, bound to a loop
// pod that still exists: its labels name the run and the attempt, its owner
// the run's UID.
func (a *KubeAuthority) Writer(ctx context.Context, token string) (*Writer, error) {
	key := sha256.Sum256([]byte(token))
	if w, ok := lookup(a, a.writers, key); ok {
		return w, a.podLives(ctx, key, w)
	}
	st, err := a.review(ctx, token, []string{a.Audience})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(st.Audiences, a.Audience) {
		return nil, fmt.Errorf("%w: the token is not for audience %q", ErrUnauthenticated, a.Audience)
	}
	ns, _, ok := serviceAccount(st.User.Username)
	pod, uid := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if !ok || pod == "" {
		return nil, fmt.Errorf("%w: %s is not a pod's service account token (project one with audience %q)", ErrForbidden, st.User.Username, a.Audience)
	}
	p, err := a.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: the token's pod %s/%s: %v", ErrForbidden, ns, pod, err)
	}
	if string(p.UID) != uid {
		return nil, fmt.Errorf("%w: the token's pod %s/%s was replaced", ErrForbidden, ns, pod)
	}
	w, err := writerOf(p)
	if err != nil {
		return nil, err
	}
	store(a, a.writers, key, w)
	return w, nil
}

// podLives checks, with Pods, that a cached writer's pod still exists; a
// writer whose pod is gone is forgotten.
func (a *KubeAuthority) podLives(ctx context.Context, key [32]byte, w *Writer) error {
	if a.Pods == nil {
		return nil
	}
	var p corev1.Pod
	err := a.Pods.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Pod}, &p)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && p.UID != w.PodUID):
		a.mu.Lock()
		delete(a.writers, key)
		a.mu.Unlock()
		return fmt.Errorf("%w: the token's pod %s/%s was deleted", ErrForbidden, w.Namespace, w.Pod)
	case err != nil:
		return fmt.Errorf("the token's pod %s/%s: %w", w.Namespace, w.Pod, err)
	}
	return nil
}

// writerOf reads the attempt a loop pod runs.
func writerOf(p *corev1.Pod) (*Writer, error) {
	run, attempt := p.Labels[farmv1.LabelRun], p.Labels[farmv1.LabelAttempt]
	n, err := strconv.Atoi(attempt)
	if run == "" || err != nil || n < 1 || p.Labels[farmv1.LabelKind] != "attempt" {
		return nil, fmt.Errorf("%w: pod %s/%s is not an attempt pod", ErrForbidden, p.Namespace, p.Name)
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "AgentRun" && o.Name == run && o.Controller != nil && *o.Controller {
			return &Writer{Namespace: p.Namespace, Run: run, RunUID: o.UID, Attempt: n, Pod: p.Name, PodUID: p.UID}, nil
		}
	}
	return nil, fmt.Errorf("%w: pod %s/%s is not owned by AgentRun %s", ErrForbidden, p.Namespace, p.Name, run)
}

// Reader authenticates a token for the API server's own audiences.
func (a *KubeAuthority) Reader(ctx context.Context, token string) (*Reader, error) {
	key := sha256.Sum256([]byte(token))
	if r, ok := lookup(a, a.readers, key); ok {
		return r, nil
	}
	st, err := a.review(ctx, token, nil)
	if err != nil {
		return nil, err
	}
	r := &Reader{User: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: map[string]authzv1.ExtraValue{}}
	for k, v := range st.User.Extra {
		r.Extra[k] = authzv1.ExtraValue(v)
	}
	if ns, _, ok := serviceAccount(st.User.Username); ok {
		if pod := first(st.User.Extra[extraPodName]); pod != "" {
			p, err := a.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("%w: the token's pod %s/%s: %v", ErrForbidden, ns, pod, err)
			}
			if p.Labels[farmv1.LabelKind] == "attempt" {
				if r.Attempt, err = writerOf(p); err != nil {
					return nil, err
				}
			}
		}
	}
	store(a, a.readers, key, r)
	return r, nil
}

// Can asks for `<verb> agentruns.farm.clawfarm.dev` in the namespace.
func (a *KubeAuthority) Can(ctx context.Context, r *Reader, verb, namespace string) (bool, error) {
	key := r.UID + "\x00" + r.User + "\x00" + strings.Join(r.Groups, ",") + "\x00" + verb + "\x00" + namespace
	if ok, hit := lookup(a, a.access, key); hit {
		return ok, nil
	}
	sar, err := a.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: r.User, UID: r.UID, Groups: r.Groups, Extra: r.Extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: farmv1.GroupVersion.Group, Resource: "agentruns",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	store(a, a.access, key, sar.Status.Allowed)
	return sar.Status.Allowed, nil
}

func serviceAccount(user string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
