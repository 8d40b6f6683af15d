package rignode

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A token refused because NodeRestriction has not yet seen the pod bound to
// this node is asked for again; any other refusal fails at once.
func TestTokenWaitsForTheBindingToBeSeen(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}, Spec: corev1.PodSpec{ServiceAccountName: "sa"}}
	for _, tc := range []struct {
		name     string
		message  string
		refusals int
		ok       bool
		calls    int
	}{
		{"binding not seen yet", "node requested token bound to a pod scheduled on a different node", 2, true, 3},
		{"forbidden for good", `User "system:node:n" cannot create resource "serviceaccounts/token"`, 2, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			calls := 0
			cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= tc.refusals {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "sa", errString(tc.message))
				}
				return true, &authv1.TokenRequest{Status: authv1.TokenRequestStatus{Token: "tok", ExpirationTimestamp: metav1.Now()}}, nil
			})
			b := &volumeBuilder{client: cs, pod: pod, dir: t.TempDir()}
			err := b.refreshToken(context.Background(), &serviceAccountToken{file: filepath.Join(b.dir, "token"), seconds: 600})
			if (err == nil) != tc.ok || calls != tc.calls {
				t.Fatalf("err %v after %d calls; want ok %v after %d", err, calls, tc.ok, tc.calls)
			}
			if !tc.ok && !strings.Contains(err.Error(), "cannot create") {
				t.Errorf("error %v does not carry the API server's message", err)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
