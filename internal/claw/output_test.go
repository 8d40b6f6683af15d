package claw

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// rigs prints kubectl's -o formats, and names the run that holds a rig
// from the run's RigLeased condition: a finished run that held it before
// is not named.
func TestRigsOutputFormats(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	ctx := context.Background()
	for _, name := range []string{"iphone-01", "pixel-01"} {
		rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.DeviceRigSpec{NodeName: "host-" + name, Endpoint: farmv1.RigEndpoint{URL: "http://" + name + ":8048/mcp"},
				Phone: farmv1.Phone{Platform: "ios", Model: "iPhone 15"}}}
		if err := env.Client.Create(ctx, rig); err != nil {
			t.Fatal(err)
		}
		rig.Status.Phase = farmv1.RigInUse
		if err := env.Client.Status().Update(ctx, rig); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"before", "after"} {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.AgentRunSpec{Trigger: "t", Model: farmv1.ModelSpec{Name: "m"}, RigRef: &farmv1.RigReference{Name: "iphone-01"}}}
		if err := env.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	operator(t, ns, "before", ended("before", 1, "DONE", "end_turn", farmv1.OutcomeDone, "done", farmv1.RunSucceeded, farmv1.ReasonDone, "done"))
	operator(t, ns, "after", running("iphone-01", 1))

	c := claw(t, ns, nil, nil, "rigs", "-o", "wide")
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if c.code != 0 || len(lines) != 3 {
		t.Fatalf("-o wide: exit %d, stderr %s, stdout:\n%s", c.code, c.errOut, c.out)
	}
	for i, want := range [][]string{
		{"NAME", "NODE", "PHASE", "RUN", "TURN", "QUEUE", "SELECTOR", "AGE", "PLATFORM", "MODEL", "ENDPOINT"},
		{"iphone-01", "host-iphone-01", "InUse", "after", "0/300", "0", "0"},
		{"pixel-01", "host-pixel-01", "InUse", "-", "-", "0", "0"},
	} {
		got := strings.Fields(lines[i])
		if i > 0 {
			if tail := strings.Join(got[len(got)-4:], " "); !strings.HasSuffix(tail, "ios iPhone 15 http://"+want[0]+":8048/mcp") {
				t.Errorf("-o wide row %d ends %q", i, tail)
			}
			got = got[:7]
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("-o wide row %d: got %v, want %v", i, got, want)
		}
	}

	c = claw(t, ns, nil, nil, "rigs", "--no-headers")
	if lines := strings.Split(strings.TrimSpace(c.out.String()), "\n"); c.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "iphone-01 ") ||
		strings.Contains(c.out.String(), "PLATFORM") {
		t.Errorf("--no-headers: exit %d, stdout:\n%s", c.code, c.out)
	}

	c = claw(t, ns, nil, nil, "rigs", "-o", "name")
	if got := c.out.String(); c.code != 0 || got != "devicerig.farm.clawfarm.dev/iphone-01\ndevicerig.farm.clawfarm.dev/pixel-01\n" {
		t.Errorf("-o name: exit %d, stdout %q", c.code, got)
	}

	c = claw(t, ns, nil, nil, "rigs", "-o", "json")
	var list struct {
		Kind  string
		Items []farmv1.DeviceRig
	}
	if err := json.Unmarshal([]byte(c.out.String()), &list); err != nil || c.code != 0 {
		t.Fatalf("-o json: exit %d, %v:\n%s", c.code, err, c.out)
	}
	if list.Kind != "List" || len(list.Items) != 2 || list.Items[0].Kind != "DeviceRig" || list.Items[0].APIVersion != farmv1.GroupVersion.String() ||
		list.Items[1].Spec.Endpoint.URL != "http://pixel-01:8048/mcp" || len(list.Items[0].ManagedFields) != 0 {
		t.Errorf("-o json: %+v", list)
	}

	c = claw(t, ns, nil, nil, "rigs", "-o", "jsonpath={.items[*].metadata.name}")
	if got := c.out.String(); c.code != 0 || got != "iphone-01 pixel-01" {
		t.Errorf("-o jsonpath: exit %d, stdout %q", c.code, got)
	}
	c = claw(t, ns, nil, nil, "rigs", "-o", "yaml")
	if c.code != 0 || !strings.HasPrefix(c.out.String(), "apiVersion: v1\nitems:\n- apiVersion: farm.clawfarm.dev/v1alpha1\n  kind: DeviceRig\n") {
		t.Errorf("-o yaml: exit %d, stdout:\n%s", c.code, c.out)
	}

	c = claw(t, ns, nil, nil, "rigs", "-o", "tabel")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), `--output "tabel": want one of wide, json`) || c.out.String() != "" {
		t.Errorf("-o tabel: exit %d, stderr %q", c.code, c.errOut)
	}
}

// run -o prints the run it created, as kubectl create -o does; -o name
// gives the generated name a script needs, kind/name and nothing else.
func TestRunOutputFormats(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	base := []string{"--rig", "iphone-01", "--model", "m", "--trigger", "t"}
	c := claw(t, ns, nil, nil, append([]string{"run", "named", "-o", "name"}, base...)...)
	if got := c.out.String(); c.code != 0 || got != "agentrun.farm.clawfarm.dev/named\n" {
		t.Errorf("-o name: exit %d, stdout %q, stderr %q", c.code, got, c.errOut)
	}
	c = claw(t, ns, nil, nil, append([]string{"run", "as-json", "-o", "json"}, base...)...)
	var run farmv1.AgentRun
	if err := json.Unmarshal([]byte(c.out.String()), &run); err != nil || c.code != 0 {
		t.Fatalf("-o json: exit %d, %v:\n%s", c.code, err, c.out)
	}
	if run.Kind != "AgentRun" || run.Name != "as-json" || run.UID == "" || run.Spec.QueueMode != farmv1.QueueModeQueue {
		t.Errorf("-o json must print the run as stored (kind, uid, defaults): %+v", run)
	}
	c = claw(t, ns, nil, nil, append([]string{"run", "dry", "--dry-run=server", "-o", "jsonpath={.metadata.name} {.spec.queueMode}"}, base...)...)
	if got := c.out.String(); c.code != 0 || got != "dry queue" {
		t.Errorf("--dry-run=server -o jsonpath: exit %d, stdout %q, stderr %q", c.code, got, c.errOut)
	}
	c = claw(t, ns, nil, nil, append([]string{"run", "dry", "--dry-run=client", "-o", "name"}, base...)...)
	if got := c.out.String(); c.code != 0 || got != "agentrun.farm.clawfarm.dev/dry\n" {
		t.Errorf("--dry-run=client -o name: exit %d, stdout %q", c.code, got)
	}
	for _, args := range [][]string{
		{"run", "w", "-o", "name", "--wait"},
		{"run", "w", "-o", "wide"},
	} {
		c = claw(t, ns, nil, nil, append(args, base...)...)
		if c.code != ExitError || c.out.String() != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, c.code, c.out, c.errOut)
		}
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w"}, &farmv1.AgentRun{}); err == nil {
		t.Error("a refused -o created the run")
	}
}

// __complete, which kubectl_complete-claw calls, offers the namespace's
// runs for a RUN argument and its rigs for --rig.
func TestCompletesNames(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	ctx := context.Background()
	for _, name := range []string{"set-a-timer", "set-an-alarm", "wifi-off"} {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.AgentRunSpec{Trigger: "t", Model: farmv1.ModelSpec{Name: "m"}, RigRef: &farmv1.RigReference{Name: "iphone-01"}}}
		if err := env.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iphone-01"},
		Spec: farmv1.DeviceRigSpec{NodeName: "n", Endpoint: farmv1.RigEndpoint{URL: "http://r:8048/mcp"}}}
	if err := env.Client.Create(ctx, rig); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "wait", "set-"}, "set-a-timer\nset-an-alarm\n:4\n"},
		{[]string{"__complete", "logs", ""}, "set-a-timer\nset-an-alarm\nwifi-off\n:4\n"},
		{[]string{"__complete", "cancel", "wifi-off", ""}, ":4\n"}, // one RUN only
		{[]string{"__complete", "run", "x", "--rig", "i"}, "iphone-01\n:4\n"},
		{[]string{"__complete", "rigs", "-o", "j"}, "json\njsonpath\njsonpath-as-json\njsonpath-file\n:4\n"},
	} {
		got := claw(t, ns, nil, nil, c.args...)
		if got.code != 0 || got.out.String() != c.want {
			t.Errorf("%v: exit %d, got %q, want %q", c.args, got.code, got.out, c.want)
		}
	}
}
