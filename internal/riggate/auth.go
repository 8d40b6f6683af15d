package riggate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Extra keys the API server puts in a pod-bound token's user info.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// KubeAuthority asks the API server who a token is (a TokenReview with the
// rig audience, cached for TTL) and reads the pod it is bound to from Pods
// on every request (a watch-fed cache in production): a pod that is gone,
// or was replaced, is no caller any more, whatever the cache of reviews says.
type KubeAuthority struct {
	Client kubernetes.Interface
	Pods   client.Reader
	// Live, when set, is asked for a pod the cache has not seen yet (one
	// created a moment ago); the cache alone decides that a pod is gone
	// once it has seen it.
	Live     client.Reader
	Audience string
	TTL      time.Duration
	Now      func() time.Time

	mu      sync.Mutex
	reviews map[[32]byte]review
}

type review struct {
	ns, pod, podUID string
	expires         time.Time
}

// maxReviews bounds the cache of reviews; past it the cache starts over.
const maxReviews = 4096

// Caller reviews the token and reads its pod.
func (a *KubeAuthority) Caller(ctx context.Context, token string) (*Caller, error) {
	rv, err := a.review(ctx, token)
	if err != nil {
		return nil, err
	}
	var p corev1.Pod
	key := client.ObjectKey{Namespace: rv.ns, Name: rv.pod}
	err = a.Pods.Get(ctx, key, &p)
	if apierrors.IsNotFound(err) && a.Live != nil {
		err = a.Live.Get(ctx, key, &p)
	}
	switch {
	case apierrors.IsNotFound(err) || (err == nil && string(p.UID) != rv.podUID):
		return nil, fmt.Errorf("%w: the token's pod %s/%s is gone", ErrForbidden, rv.ns, rv.pod)
	case err != nil:
		return nil, fmt.Errorf("the token's pod %s/%s: %w", rv.ns, rv.pod, err)
	}
	return callerOf(&p)
}

func (a *KubeAuthority) review(ctx context.Context, token string) (review, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	rv, ok := a.reviews[key]
	a.mu.Unlock()
	if ok && now().Before(rv.expires) {
		return rv, nil
	}
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{a.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return review{}, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "the API server does not accept this token"
		}
		return review{}, fmt.Errorf("%w: %s", ErrUnauthenticated, why)
	}
	if !slices.Contains(st.Audiences, a.Audience) {
		return review{}, fmt.Errorf("%w: the token is not for audience %q", ErrUnauthenticated, a.Audience)
	}
	rest, isSA := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	ns, _, _ := strings.Cut(rest, ":")
	pod, uid := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if !isSA || ns == "" || pod == "" {
		return review{}, fmt.Errorf("%w: %s is not a pod's service account token (project one with audience %q)", ErrForbidden, st.User.Username, a.Audience)
	}
	ttl := a.TTL
	if ttl == 0 {
		ttl = time.Minute
	}
	rv = review{ns: ns, pod: pod, podUID: uid, expires: now().Add(ttl)}
	a.mu.Lock()
	if a.reviews == nil || len(a.reviews) >= maxReviews {
		a.reviews = map[[32]byte]review{}
	}
	a.reviews[key] = rv
	a.mu.Unlock()
	return rv, nil
}

// callerOf reads the attempt a pod runs: an attempt pod, owned by the
// AgentRun its run label names, on the rig its rig label names.
func callerOf(p *corev1.Pod) (*Caller, error) {
	run, rig := p.Labels[farmv1.LabelRun], p.Labels[farmv1.LabelRig]
	if p.Labels[farmv1.LabelKind] != "attempt" || run == "" || rig == "" {
		return nil, fmt.Errorf("%w: pod %s/%s is not an attempt pod", ErrForbidden, p.Namespace, p.Name)
	}
	if p.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: pod %s/%s is being deleted", ErrForbidden, p.Namespace, p.Name)
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "AgentRun" && o.Name == run && o.Controller != nil && *o.Controller {
			return &Caller{Namespace: p.Namespace, Pod: p.Name, Run: run, RunUID: o.UID, Rig: rig, Policies: policiesOf(p)}, nil
		}
	}
	return nil, fmt.Errorf("%w: pod %s/%s is not owned by AgentRun %s", ErrForbidden, p.Namespace, p.Name, run)
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// policiesOf is the ToolPolicies setting of the pod's containers.
func policiesOf(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == contract.SettingToolPolicies.Env {
				return e.Value
			}
		}
	}
	return ""
}
