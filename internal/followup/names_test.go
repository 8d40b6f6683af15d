package followup

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Every follow-up of every run the API server accepts has a name it accepts
// too: a root of the longest name still gets <root…>-f<N> within the limit,
// for every link of the longest chain, and distinct roots keep distinct names.
func TestChildNamesFit(t *testing.T) {
	if ChildName("ask", 1) != "ask-f1" {
		t.Fatalf("a short root keeps its name: %q", ChildName("ask", 1))
	}
	roots := []string{strings.Repeat("a", farmv1.MaxNameLength), strings.Repeat("a", farmv1.MaxNameLength-1) + "b",
		strings.Repeat("a", 44) + "-.-b", "x.y" + strings.Repeat("z", 45)}
	seen := map[string]string{}
	for _, root := range roots {
		for chain := int32(1); chain <= 100; chain++ {
			n := Next{Root: root, Chain: chain, Name: ChildName(root, chain)}
			for _, name := range []string{n.Name, ChildNameFor(n, "0f3c9a7e-5b1d-4c2e-9f00-1234567890ab")} {
				if len(name) > farmv1.MaxNameLength || strings.Contains(name, "-.") || strings.Contains(name, ".-") {
					t.Fatalf("follow-up %d of %q is %q (%d characters): not a name the API server accepts", chain, root, name, len(name))
				}
				if other, dup := seen[name]; dup {
					t.Fatalf("%q names follow-ups of %q and %q", name, other, root)
				}
				seen[name] = root
			}
		}
	}
	if ChildNameFor(Next{Root: "ask", Chain: 1}, "a") == ChildNameFor(Next{Root: "ask", Chain: 1}, "b") {
		t.Fatal("the alternative name must depend on the parent")
	}
}

// A follow-up is the run that carries its parent's UID, not any run of its name.
func TestIsChildOf(t *testing.T) {
	parent := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", UID: "uid-1"},
		Spec: farmv1.AgentRunSpec{FollowUp: farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](2)}}}
	n, _ := NextOf(parent)
	child := ChildRun(parent, n, "t")
	if !IsChildOf(child, parent) {
		t.Fatalf("ChildRun's run is not its parent's child: %v", child.Labels)
	}
	again := parent.DeepCopy()
	again.UID = "uid-2"
	if IsChildOf(child, again) {
		t.Fatal("a run of the same name with another UID took an earlier run's follow-up as its own")
	}
	if IsChildOf(&farmv1.AgentRun{}, &farmv1.AgentRun{}) {
		t.Fatal("a parent without a UID has no children")
	}
}

// Agent job names fit their limits and stay DNS names whatever the rig and id.
func TestAgentJobNamesFit(t *testing.T) {
	rig := strings.Repeat("r", 63)
	for _, id := range []string{"water", strings.Repeat("j", 40), "___", "Water Plants!"} {
		cj := AgentJobCronJobName(rig, id)
		run := fitName(agentJobRunPrefix(rig, id), "-29412000")
		if len(cj) > maxCronJobName || len(run) > farmv1.MaxNameLength {
			t.Fatalf("id %q: CronJob %q (%d), run %q (%d)", id, cj, len(cj), run, len(run))
		}
	}
	for _, s := range []string{"___", "-", "Ω"} {
		if got := dnsName(s, 20); got == "" || got[0] == '-' || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Fatalf("dnsName(%q) = %q, not a DNS name", s, got)
		}
	}
}
