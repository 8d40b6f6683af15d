package devicerig_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The manager fetches a rig's health URL from its own network position, so
// the URL may not lead anywhere but the rig's own host: the API refuses a
// health URL on another host, and a redirect is reported, not followed.
func TestHealthURLStaysOnTheRigsHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-elsewhere")

	// Another host: refused at admission, with the message that says why.
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metadata"},
		Spec: farmv1.DeviceRigSpec{NodeName: node, Endpoint: farmv1.RigEndpoint{
			URL: "http://10.0.0.5:8048/mcp", HealthURL: "http://169.254.169.254/latest/meta-data/"}},
	}
	err := env.Client.Create(ctx, rig)
	if err == nil || !strings.Contains(err.Error(), "endpoint.healthURL must be on the endpoint URL's host") {
		t.Fatalf("a health URL on another host: %v, want refused", err)
	}
	// The same bytes before the host, with user information in front of
	// two different hosts: refused too, by what the URLs parse to.
	for _, c := range []struct{ name, url, health, want string }{
		{"userinfo", "http://x:1@127.0.0.1:8048/mcp", "http://x:2@127.0.0.3/api/status", "must not carry user information"},
		{"userinfo-endpoint", "http://admin@10.0.0.5:8048/mcp", "", "must not carry user information"},
		{"other-host", "http://10.0.0.5:8048/mcp", "http://10.0.0.50/api/status", "endpoint.healthURL must be on the endpoint URL's host"},
		{"link-local", "http://169.254.169.254/latest/meta-data/", "", "must not name a link-local, unspecified or cloud-metadata address"},
		{"link-local-v6", "http://[fe80::1]:8048/mcp", "", "must not name a link-local"},
		{"metadata-name", "http://Metadata.Google.Internal/computeMetadata/v1/", "", "must not name a link-local, unspecified or cloud-metadata address"},
		{"unspecified", "http://0.0.0.0:8048/mcp", "", "must not name a link-local, unspecified or cloud-metadata address"},
	} {
		bad := rig.DeepCopy()
		bad.Name, bad.Spec.Endpoint = c.name, farmv1.RigEndpoint{URL: c.url, HealthURL: c.health}
		if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (url %q, healthURL %q): %v, want refused with %q", c.name, c.url, c.health, err, c.want)
		}
	}

	// The same host on another port is the rig's own business.
	rig.Name, rig.Spec.Endpoint.HealthURL = "otherport", "http://10.0.0.5:9000/api/status"
	if err := env.Client.Create(ctx, rig); err != nil {
		t.Fatalf("a health URL on the endpoint's host: %v", err)
	}

	// A redirect to another server is not followed.
	var followed atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		followed.Add(1)
		_, _ = w.Write([]byte(`{"arm":true,"camera":true,"bridge":true,"calibrated":true,"origin_pinned":true,"ready":true}`))
	}))
	defer target.Close()
	redirector := httptest.NewServer(http.RedirectHandler(target.URL+"/api/status", http.StatusFound))
	defer redirector.Close()
	env.MakeRig(t, ns, "rig", nil)
	var cur farmv1.DeviceRig
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rig"}, &cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Endpoint.HealthURL = redirector.URL + "/api/status"
	if err := env.Client.Patch(ctx, &cur, patch); err != nil {
		t.Fatal(err)
	}
	r := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		c := rigCondition(r, farmv1.ConditionEndpointReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	if c := rigCondition(r, farmv1.ConditionEndpointReachable); !strings.Contains(c.Message, "redirects are not followed") {
		t.Errorf("EndpointReachable %+v, want the redirect named", c)
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

// A health route that answers something else than the status JSON is
// reported without a byte of what it said: the rig's status is readable by
// everyone who may read rigs, and the answer could be anyone's.
func TestProbeEchoesNothingOfTheAnswer(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	secret := "s3cr3t-token-from-somewhere"
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(secret))
	}))
	defer liar.Close()
	env.MakeRig(t, ns, "rig", nil)
	var cur farmv1.DeviceRig
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rig"}, &cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Endpoint.HealthURL = liar.URL + "/api/status"
	if err := env.Client.Patch(ctx, &cur, patch); err != nil {
		t.Fatal(err)
	}
	r := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		c := rigCondition(r, farmv1.ConditionEndpointReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	c := rigCondition(r, farmv1.ConditionEndpointReachable)
	want := fmt.Sprintf("did not answer the PhysiClaw status JSON (%d bytes of text/plain)", len(secret))
	if !strings.Contains(c.Message, want) {
		t.Errorf("EndpointReachable %q, want it to say %q", c.Message, want)
	}
	if strings.Contains(c.Message, "'s'") || strings.Contains(c.Message, secret[:4]) || strings.Contains(c.Message, "invalid character") {
		t.Errorf("EndpointReachable %q echoes the answer", c.Message)
	}
}
