package claw

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/clawfarm/clawfarm/internal/version"
)

// version prints the client's build, the API server's version and the
// chart's manager Deployments, as text and as JSON; --client asks nothing.
func TestVersion(t *testing.T) {
	ns := env.Namespace(t)
	labels := map[string]string{labelAppName: "clawfarm", labelAppComponent: "manager", labelAppVersion: "0.3.1", "app.kubernetes.io/instance": "t"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-clawfarm-manager", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "t"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "registry.example/clawfarm/manager@sha256:ab"}}},
			},
		},
	}
	if err := env.Client.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}

	c := claw(t, ns, nil, nil, "version")
	out := c.out.String()
	if c.code != 0 {
		t.Fatalf("version: exit %d: %s%s", c.code, out, c.errOut)
	}
	for _, want := range []string{"Client Version: " + version.Version, runtime.Version(), "Server Version: " + sv.GitVersion + "\n",
		"Operator: " + ns + "/t-clawfarm-manager 0.3.1, 0/2 ready, image registry.example/clawfarm/manager@sha256:ab\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}

	c = claw(t, ns, nil, nil, "version", "-o", "json")
	var info versionInfo
	if err := json.Unmarshal([]byte(c.out.String()), &info); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, c.out)
	}
	var mine *operatorVersion
	for i := range info.Operators {
		if info.Operators[i].Namespace == ns {
			mine = &info.Operators[i]
		}
	}
	if info.Client.GoVersion != runtime.Version() || info.Server != sv.GitVersion || mine == nil || mine.Version != "0.3.1" || mine.Replicas != 2 {
		t.Errorf("version -o json: %+v", info)
	}

	c = claw(t, ns, nil, nil, "version", "--client")
	if c.code != 0 || strings.Contains(c.out.String(), "Server Version") || strings.Contains(c.out.String(), "Operator") ||
		!strings.HasPrefix(c.out.String(), "Client Version: ") {
		t.Errorf("version --client: exit %d:\n%s%s", c.code, c.out, c.errOut)
	}
	if c = claw(t, ns, nil, nil, "version", "-o", "wide"); c.code != ExitError || !strings.Contains(c.errOut.String(), "want json or yaml") {
		t.Errorf("version -o wide: exit %d, %s", c.code, c.errOut)
	}
}
