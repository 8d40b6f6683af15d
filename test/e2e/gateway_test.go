//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// rigToken is a token of the pod's service account for the rig audience,
// bound to the pod when pod is named: what the kubelet projects for a loop pod.
func rigToken(t *testing.T, sa string, pod *corev1.Pod) string {
	t.Helper()
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{contract.DefaultRigAudience}, ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	acct := &corev1.ServiceAccount{}
	acct.Namespace, acct.Name = devcluster.RunNamespace, sa
	if err := cluster.Client.SubResource("token").Create(ctxFor(t, 10*time.Second), acct, tr); err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

// throughGateway GETs rigsim's ground truth of rig i through the rig
// gateway, a route only the lease holder's pod may take, and returns the
// status and body.
func throughGateway(t *testing.T, i int, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, cluster.GatewayURL(i)+"/api/sim/state", nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("rig gateway: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// strangersRefused wants every rig of the cluster to refuse, through its
// gateway, a caller that is not the lease holder's pod: one with no token,
// the loop's own service account bound to no pod, and the running pod of
// rig own (whose token is podToken) on every other rig.
func strangersRefused(t *testing.T, own int, sa, podToken string) {
	t.Helper()
	unbound := rigToken(t, sa, nil)
	for i := 0; i < rigCount; i++ {
		callers := []struct {
			what, tok string
			code      int
		}{{"no token", "", http.StatusUnauthorized}, {"a token bound to no pod", unbound, http.StatusForbidden}}
		if i != own {
			callers = append(callers, struct {
				what, tok string
				code      int
			}{"the attempt pod of " + rig(own), podToken, http.StatusForbidden})
		}
		for _, c := range callers {
			if code, body := throughGateway(t, i, c.tok); code != c.code {
				t.Errorf("%s through the gateway of %s: %d %q, want %d", c.what, rig(i), code, body, c.code)
			}
		}
	}
}

// sessionCut watches pod, whose run was cancelled a moment ago, and wants
// its token refused by its rig's gateway within a second of the pod's
// deletion: long before the pod has ended and its run gives the Lease back.
func sessionCut(t *testing.T, i int, pod *corev1.Pod, tok string, cancelled time.Time) {
	t.Helper()
	var deleting, refused time.Time
	deadline := time.Now().Add(time.Minute)
	for refused.IsZero() || deleting.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: deletion seen at %v, refused at %v, a minute after the cancel", pod.Name, deleting, refused)
		}
		if deleting.IsZero() {
			var p corev1.Pod
			err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &p)
			if err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
				deleting = time.Now()
			}
		}
		if refused.IsZero() {
			if code, body := throughGateway(t, i, tok); code == http.StatusForbidden {
				refused = time.Now()
				if !strings.Contains(body, "being deleted") && !strings.Contains(body, "is gone") && !strings.Contains(body, "held by") {
					t.Errorf("the cancelled pod's refusal says %q", body)
				}
			} else if code != http.StatusOK {
				t.Fatalf("the cancelled pod through the gateway: %d %q", code, body)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("pod %s: deletion seen %.2fs after the cancel, refused by the gateway %.2fs after it",
		pod.Name, deleting.Sub(cancelled).Seconds(), refused.Sub(cancelled).Seconds())
	if d := refused.Sub(deleting); d > time.Second {
		t.Errorf("the gateway of %s still let the cancelled pod in %s after its deletion, want within a second", rig(i), d)
	}
}
