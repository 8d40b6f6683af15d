package bench

import (
	"context"
	"os"
	"strings"
	"testing"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"sigs.k8s.io/yaml"
)

// The API server checks every x-kubernetes-validations rule of an AgentRun
// on every update of it, its status's included: the manager's status writes,
// the loop's progress patches, a user's cancel. The rule that freezes a
// started run's spec compares the whole spec, so its price is paid on each
// of them. BenchmarkAgentRunUpdateRules measures what the CRD's rules cost
// one status update of a finished run (`make bench-crd`), as the API
// server's CEL validator evaluates them, ratcheting included.

// agentRunCRD is the AgentRun CRD's structural schema and its CEL validator.
func agentRunCRD(tb testing.TB) (*structuralschema.Structural, *cel.Validator) {
	tb.Helper()
	raw, err := os.ReadFile("../../config/crd/bases/farm.clawfarm.dev_agentruns.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		tb.Fatal(err)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		tb.Fatal(err)
	}
	ss, err := structuralschema.NewStructural(&internal)
	if err != nil {
		tb.Fatal(err)
	}
	return ss, cel.NewValidator(ss, true, celconfig.PerCallLimit)
}

// finishedRun is an AgentRun as a one-attempt session that ended DONE
// leaves it (bench-operator's runs), with the CRD's defaults filled in.
const finishedRun = `{"apiVersion": "farm.clawfarm.dev/v1alpha1", "kind": "AgentRun",
 "metadata": {"name": "run-0500", "namespace": "bench", "generation": 1},
 "spec": {"rigRef": {"name": "rig-100"}, "trigger": "bench", "model": {"provider": "openai", "name": "m"}},
 "status": {"observedGeneration": 1, "phase": "Succeeded", "rig": "rig-100", "attempt": 1,
  "sentinel": "DONE", "recap": "done", "exitReason": "end_turn",
  "attempts": [{"attempt": 1, "pod": "run-0500-a1", "startTime": "2026-12-07T01:56:12Z", "finishTime": "2026-12-07T01:56:14Z",
   "sentinel": "DONE", "exitCode": 0, "exitReason": "end_turn", "outcome": "Done", "counted": true,
   "message": "DONE (end_turn, exit 0): done", "usage": {}}],
  "usage": {}, "startTime": "2026-12-07T01:56:12Z", "completionTime": "2026-12-07T01:56:14Z",
  "conditions": [
   {"type": "Succeeded", "status": "True", "observedGeneration": 1, "lastTransitionTime": "2026-12-07T01:56:14Z", "reason": "Done", "message": "the agent ended the session with DONE"},
   {"type": "RigLeased", "status": "False", "observedGeneration": 1, "lastTransitionTime": "2026-12-07T01:56:14Z", "reason": "Released", "message": "rig rig-100 released to run run-0700, next in its queue"},
   {"type": "Finished", "status": "True", "observedGeneration": 1, "lastTransitionTime": "2026-12-07T01:56:14Z", "reason": "Succeeded", "message": "the run ended Succeeded (Done): the agent ended the session with DONE"}]}}`

// runObject decodes a run as the API server does (integers as int64) and
// fills in the CRD's defaults; edit then changes it.
func runObject(tb testing.TB, ss *structuralschema.Structural, edit func(map[string]any)) map[string]any {
	tb.Helper()
	var obj map[string]any
	if err := utiljson.Unmarshal([]byte(finishedRun), &obj); err != nil {
		tb.Fatal(err)
	}
	structuraldefaulting.Default(obj, ss)
	if edit != nil {
		edit(obj)
	}
	return obj
}

func validateRunUpdate(ss *structuralschema.Structural, v *cel.Validator, obj, old map[string]any) field.ErrorList {
	correlated := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: ss})
	errs, _ := v.Validate(context.Background(), nil, ss, obj, old, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(correlated))
	return errs
}

// sub is the object at path in obj.
func sub(obj map[string]any, path ...string) map[string]any {
	for _, p := range path {
		obj = obj[p].(map[string]any)
	}
	return obj
}

// TestAgentRunFreezeRule checks the rule the benchmark measures decides as
// it should: a status change and a cancel pass, any other spec change of a
// started run is refused, and a Pending run's spec may still change.
func TestAgentRunFreezeRule(t *testing.T) {
	ss, v := agentRunCRD(t)
	old := runObject(t, ss, nil)
	for _, c := range []struct {
		name   string
		edit   func(map[string]any)
		frozen bool
	}{
		{"status only", func(o map[string]any) { sub(o, "status")["recap"] = "something else" }, false},
		{"cancel", func(o map[string]any) { sub(o, "spec")["cancel"] = true }, false},
		{"trigger", func(o map[string]any) { sub(o, "spec")["trigger"] = "something else" }, true},
		{"a limit", func(o map[string]any) { sub(o, "spec", "limits")["maxAttempts"] = int64(5) }, true},
		{"the rig", func(o map[string]any) { sub(o, "spec", "rigRef")["name"] = "rig-101" }, true},
		{"a field added", func(o map[string]any) { sub(o, "spec")["denyTools"] = []any{"tap"} }, true},
		{"cancel and the model", func(o map[string]any) {
			sub(o, "spec")["cancel"] = true
			sub(o, "spec", "model")["name"] = "other"
		}, true},
	} {
		errs := validateRunUpdate(ss, v, runObject(t, ss, c.edit), old)
		refused := len(errs) > 0 && strings.Contains(errs.ToAggregate().Error(), "only spec.cancel may change")
		if refused != c.frozen || (!c.frozen && len(errs) > 0) {
			t.Errorf("%s: %v, want refused by the freeze: %v", c.name, errs, c.frozen)
		}
	}
	pending := runObject(t, ss, func(o map[string]any) { sub(o, "status")["phase"] = "Pending" })
	edited := runObject(t, ss, func(o map[string]any) {
		sub(o, "status")["phase"] = "Pending"
		sub(o, "spec")["trigger"] = "something else"
	})
	if errs := validateRunUpdate(ss, v, edited, pending); len(errs) > 0 {
		t.Errorf("a Pending run's spec change: %v, want it accepted", errs)
	}
}

// BenchmarkAgentRunUpdateRules is one status update of a finished run
// through every CEL rule of the AgentRun CRD.
func BenchmarkAgentRunUpdateRules(b *testing.B) {
	ss, v := agentRunCRD(b)
	old := runObject(b, ss, nil)
	obj := runObject(b, ss, func(o map[string]any) { sub(o, "status")["recap"] = "something else" })
	b.ReportAllocs()
	for b.Loop() {
		if errs := validateRunUpdate(ss, v, obj, old); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}
