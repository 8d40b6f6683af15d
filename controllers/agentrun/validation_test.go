package agentrun_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The samples in config/samples are what users copy; the API server must accept them.
func TestSamplesAreAccepted(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	files, err := filepath.Glob("../../config/samples/farm_*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("samples: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u.SetNamespace(ns)
		if err := k8s.Create(context.Background(), u, client.DryRunAll); err != nil {
			t.Errorf("%s rejected: %v", f, err)
		}
	}
}

func TestDefaultsComeFromTheSchema(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	run := newRun(ns, "defaults", "nowhere")
	run.Spec.Model = farmv1.ModelSpec{Name: "gpt-4.1"}
	create(t, run)
	got := getRun(t, ns, "defaults")
	l := got.Spec.Limits
	if got.Spec.Model.Provider != "openai" || got.Spec.Model.ContextWindow != 128000 || l.MaxTurns != 300 || l.MaxAttempts != 3 ||
		l.AttemptTimeoutSeconds != 3600 || l.InfraRetryLimit() != 5 || l.MaxInfraRetries == nil || got.Spec.FollowUp.DefaultDelayMinutes != 15 || got.Spec.FollowUp.MaxChain == nil || *got.Spec.FollowUp.MaxChain != 10 {
		t.Fatalf("defaults not applied: %+v %+v", got.Spec.Model, got.Spec)
	}
}

// A run reads Pending before the operator first writes its status (a
// schema default): `kubectl get agentruns` shows a phase for every run of a
// burst, though the first status of the runs that wait is written last.
func TestNewRunReadsPending(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	run := newRun(ns, "unwritten", "nowhere")
	if err := k8s.Create(context.Background(), run, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if run.Status.Phase != farmv1.RunPending || run.Status.StartTime != nil || len(run.Status.Conditions) != 0 {
		t.Fatalf("a run the operator has not written reads %+v, want phase Pending and nothing else", run.Status)
	}
}

// A table of bad manifests: the API server refuses each with a message that says what is wrong.
func TestBadManifestsAreRejected(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	run := func(spec string) string {
		return "apiVersion: farm.clawfarm.dev/v1alpha1\nkind: AgentRun\nmetadata:\n  name: bad\nspec:\n" + spec
	}
	model := "  model: {name: m}\n"
	cases := []struct {
		name, manifest, want string
	}{
		{"no rig", run("  trigger: go\n" + model), "set exactly one of rigRef"},
		{"both rigs", run("  trigger: go\n  rigRef: {name: a}\n  rigSelector: {matchLabels: {a: b}}\n" + model), "set exactly one of rigRef"},
		{"empty trigger", run("  trigger: ''\n  rigRef: {name: a}\n" + model), "spec.trigger"},
		{"NUL in the trigger", run("  trigger: \"go\\0now\"\n  rigRef: {name: a}\n" + model), "trigger may not contain a NUL character"},
		{"NUL in the prompt's tail", run("  trigger: go\n  rigRef: {name: a}\n  systemPromptAppend: \"be\\0kind\"\n" + model), "systemPromptAppend may not contain a NUL character"},
		{"no model", run("  trigger: go\n  rigRef: {name: a}\n"), "spec.model"},
		{"unknown provider", run("  trigger: go\n  rigRef: {name: a}\n  model: {name: m, provider: skynet}\n"), "spec.model.provider"},
		{"compatible without URL", run("  trigger: go\n  rigRef: {name: a}\n  model: {name: m, provider: openai-compatible}\n"), "baseURL is required"},
		{"unknown wire", run("  trigger: go\n  rigRef: {name: a}\n  model: {name: m, api: completions}\n"), "spec.model.api"},
		{"anthropic on the responses wire", run("  trigger: go\n  rigRef: {name: a}\n  model: {name: m, provider: anthropic, api: responses}\n"), "Messages API only"},
		{"zero attempts", run("  trigger: go\n  rigRef: {name: a}\n" + model + "  limits: {maxAttempts: 0}\n"), "spec.limits.maxAttempts"},
		{"too many turns", run("  trigger: go\n  rigRef: {name: a}\n" + model + "  limits: {maxTurns: 100000}\n"), "spec.limits.maxTurns"},
		{"tiny session", run("  trigger: go\n  rigRef: {name: a}\n" + model + "  limits: {attemptTimeoutSeconds: 5}\n"), "spec.limits.attemptTimeoutSeconds"},
		{"chain too long", run("  trigger: go\n  rigRef: {name: a}\n" + model + "  followUp: {maxChain: 1000}\n"), "spec.followUp.maxChain"},
		{"zero delay", run("  trigger: go\n  rigRef: {name: a}\n" + model + "  followUp: {defaultDelayMinutes: 0}\n"), "spec.followUp.defaultDelayMinutes"},
		{"small window", run("  trigger: go\n  rigRef: {name: a}\n  model: {name: m, contextWindow: 100}\n"), "spec.model.contextWindow"},
		{"long name", strings.Replace(run("  trigger: go\n  rigRef: {name: a}\n"+model), "name: bad", "name: "+strings.Repeat("x", 60), 1), "at most 48 characters"},
		{"rig without node", "apiVersion: farm.clawfarm.dev/v1alpha1\nkind: DeviceRig\nmetadata: {name: r}\nspec:\n  endpoint: {url: 'http://h:8048/mcp'}\n", "spec.nodeName"},
		{"rig bad URL", "apiVersion: farm.clawfarm.dev/v1alpha1\nkind: DeviceRig\nmetadata: {name: r}\nspec:\n  nodeName: node-1\n  endpoint: {url: 'ftp://h/mcp'}\n", "spec.endpoint.url"},
		{"rig two volumes", "apiVersion: farm.clawfarm.dev/v1alpha1\nkind: DeviceRig\nmetadata: {name: r}\nspec:\n  nodeName: node-1\n  endpoint: {url: 'http://h:8048/mcp'}\n  stateVolume: {hostPath: /x, persistentVolumeClaim: c}\n", "at most one of stateVolume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(c.manifest), &u.Object); err != nil {
				t.Fatal(err)
			}
			u.SetNamespace(ns)
			err := k8s.Create(context.Background(), u, client.DryRunAll)
			if err == nil {
				t.Fatalf("accepted:\n%s", c.manifest)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// spec.followUp.maxChain is settable from 0 (follow-ups off) to
// MaxFollowUpChain; the API server refuses anything else, naming the field.
func TestMaxChainIsBounded(t *testing.T) {
	ns := namespace(t)
	for _, c := range []struct {
		chain int32
		ok    bool
	}{{0, true}, {1, true}, {farmv1.MaxFollowUpChain, true}, {farmv1.MaxFollowUpChain + 1, false}, {-1, false}} {
		run := newRun(ns, "chain-bound", "nowhere")
		run.Spec.FollowUp.MaxChain = &c.chain
		err := k8s.Create(context.Background(), run, client.DryRunAll)
		switch {
		case c.ok && err != nil:
			t.Errorf("maxChain %d refused: %v", c.chain, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "spec.followUp.maxChain")):
			t.Errorf("maxChain %d: %v, want a refusal that names spec.followUp.maxChain", c.chain, err)
		}
	}
}

// Once a run has started only spec.cancel may change.
func TestSpecIsFrozenOnceStarted(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	create(t, newRun(ns, "frozen", "nowhere"))
	waitPhase(t, ns, "frozen", farmv1.RunQueued)
	for _, patch := range []string{
		`{"spec":{"trigger":"something else"}}`,
		`{"spec":{"limits":{"maxAttempts":5}}}`,
		`{"spec":{"rigRef":{"name":"other"}}}`,
		`{"spec":{"denyTools":["tap"]}}`,
	} {
		obj := getRun(t, ns, "frozen")
		err := k8s.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))
		if err == nil || !strings.Contains(err.Error(), "only spec.cancel may change") {
			t.Errorf("patch %s: %v", patch, err)
		}
	}
	cancel(t, ns, "frozen")
	waitPhase(t, ns, "frozen", farmv1.RunCancelled)
}
