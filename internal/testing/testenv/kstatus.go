package testenv

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Kstatus is what kstatus — the library Flux, cli-utils and kubectl's wait
// tooling use to call a resource healthy — says of the farm object of kind
// (AgentRun, DeviceRig, ToolPolicy) named ns/name, as the API serves it.
func Kstatus(t *testing.T, c client.Reader, kind, ns, name string) *status.Result {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(farmv1.GroupVersion.WithKind(kind))
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
