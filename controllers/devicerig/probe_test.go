package devicerig_test

import (
	"context"
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
