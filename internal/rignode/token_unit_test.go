package rignode

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A rignode that restarts keeps an adopted pod's token while it is fresh,
// so taking up a node full of pods asks for no tokens at once; a token due
// for renewal, a file that is not a token, and a pod that is new are asked for.
func TestAdoptionKeepsAFreshToken(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}, Spec: corev1.PodSpec{ServiceAccountName: "sa"}}
	jwt := func(exp time.Time) string {
		claims := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d}`, exp.Unix()))
		return "eyJhbGciOiJSUzI1NiJ9." + claims + ".c2ln"
	}
	for _, tc := range []struct {
		name     string
		file     string
		adopting bool
		calls    int
	}{
		{"fresh, adopted", jwt(time.Now().Add(50 * time.Minute)), true, 0},
		{"due for renewal, adopted", jwt(time.Now().Add(5 * time.Minute)), true, 1},
		{"not a token, adopted", "garbage", true, 1},
		{"fresh, new pod", jwt(time.Now().Add(50 * time.Minute)), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			calls := 0
			cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				return true, &authv1.TokenRequest{Status: authv1.TokenRequestStatus{Token: "new", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}}, nil
			})
			b := &volumeBuilder{client: cs, pod: pod, dir: t.TempDir(), adopting: tc.adopting}
			tok := &serviceAccountToken{file: filepath.Join(b.dir, "token"), seconds: 3600}
			if err := os.WriteFile(tok.file, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := b.token(context.Background(), tok); err != nil {
				t.Fatal(err)
			}
			if calls != tc.calls {
				t.Fatalf("%d token requests, want %d", calls, tc.calls)
			}
			got, _ := os.ReadFile(tok.file)
			if want := map[bool]string{true: tc.file, false: "new"}[calls == 0]; string(got) != want {
				t.Errorf("token file %q, want %q", got, want)
			}
			if time.Until(tok.expiresAt) < 40*time.Minute {
				t.Errorf("renewal scheduled from expiry %v, want the kept or the new token's", tok.expiresAt)
			}
		})
	}
}
