// Package admission_test proves the farm's admission policies on a real API
// server: each attack the policies of config/admission/ exist for is refused
// with the policy's message, and the use it must not break is allowed. The
// requests are made as the identities of docs/security.md by impersonation:
// a run creator, a rig administrator, a loop pod's ServiceAccount (with the
// pod name a bound token carries) and the follow-up Jobs' ServiceAccount.
package admission_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

const (
	// The names config/admission/ is rendered with: the chart's defaults
	// for release clawfarm in clawfarm-system.
	systemNamespace = "clawfarm-system"
	paramsName      = "clawfarm-admission"
	loopSA          = "clawfarm-loop"
	followUpSA      = "clawfarm-followup"
	podNameKey      = "authentication.kubernetes.io/pod-name"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	ctrl.SetLogger(logr.Discard())
	if err := install(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// install creates the release namespace, the roles of config/rbac that the
// identities are bound to, and every object of config/admission/.
func install() error {
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}); err != nil {
		return err
	}
	files := []string{"../../config/rbac/loop_role.yaml", "../../config/rbac/followup_role.yaml",
		"../../config/rbac/rig_admin_role.yaml", "../../config/rbac/run_editor_role.yaml", "../../config/rbac/run_viewer_role.yaml"}
	admission, err := filepath.Glob("../../config/admission/*.yaml")
	if err != nil || len(admission) == 0 {
		return fmt.Errorf("config/admission holds no policies (%v)", err)
	}
	for _, f := range append(files, admission...) {
		objs, err := readObjects(f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := k8s.Create(ctx, o); err != nil {
				return fmt.Errorf("%s: create %s %s: %w", f, o.GetKind(), o.GetName(), err)
			}
		}
	}
	return nil
}

func readObjects(file string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// identity is who a request is made as.
type identity struct {
	user   string
	groups []string
	extra  map[string][]string
}

// as returns a client that impersonates id.
func as(t *testing.T, id identity) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.user, Groups: append([]string{"system:authenticated"}, id.groups...), Extra: id.extra}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceAccount is the identity of a ServiceAccount's token; pod, when not
// empty, is the pod the token is bound to, as the kubelet's projected tokens are.
func serviceAccount(ns, name, pod string) identity {
	id := identity{user: "system:serviceaccount:" + ns + ":" + name, groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}
	if pod != "" {
		id.extra = map[string][]string{podNameKey: {pod}, "authentication.kubernetes.io/pod-uid": {"0b0e7c6e-0000-4000-8000-000000000001"}}
	}
	return id
}

// bind binds subject to the ClusterRole role in ns, as a RoleBinding does
// for a team or a run namespace's ServiceAccounts.
func bind(t *testing.T, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: role + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
	if err := k8s.Create(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: name}
}

func saSubject(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}
}

// newRun is a run a team would write: a rig by name, a model with a key.
func newRun(ns, name string) *farmv1.AgentRun {
	return &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: farmv1.AgentRunSpec{
			RigRef:  &farmv1.RigReference{Name: "iphone-01"},
			Trigger: "Set a 5 minute timer.",
			Model: farmv1.ModelSpec{Provider: "openai", Name: "gpt-4.1",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "api-key"}},
		},
	}
}

func newRig(ns, name string, state farmv1.StateVolume) *farmv1.DeviceRig {
	return &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: farmv1.DeviceRigSpec{NodeName: "rig-host-1", Endpoint: farmv1.RigEndpoint{URL: "http://rig-host-1:8048/mcp"},
			Phone: farmv1.Phone{Platform: "ios", Model: "iPhone 15"}, StateVolume: state},
	}
}

// refused fails unless err is the API server refusing the request with a
// message that contains want (a policy's message, or RBAC's "forbidden").
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused with %q", what, want)
		return
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("%s: %v, want a refusal with %q", what, err, want)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: refused with %q, want %q", what, err.Error(), want)
		return
	}
	t.Logf("%s: refused: %s", what, err)
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: refused, want allowed: %v", what, err)
	}
}

// eventually retries f until it returns nil: a policy binding, or a change
// of its ConfigMap, reaches the API server's admission a moment after the
// write that made it.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	within(t, 30*time.Second, what, f)
}

// within is eventually with its own deadline.
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// inForce waits until do is refused with want: the policy that refuses it is
// in force. The API server loads a policy and its binding from its own
// informers and type-checks it first; on a loaded machine (CI's first run,
// compiling beside it) that was seen to take over 30 s.
func inForce(t *testing.T, policy string, want string, do func() error) {
	t.Helper()
	within(t, 90*time.Second, "policy "+policy+" never took effect", func() error {
		err := do()
		if err != nil && strings.Contains(err.Error(), want) {
			return nil
		}
		return fmt.Errorf("the known-bad request got %v, want a refusal with %q", err, want)
	})
}
