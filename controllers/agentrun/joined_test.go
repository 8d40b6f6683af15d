package agentrun

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// The WAIT follow-up of a session other runs joined carries every task of
// the session on, once, even when the session's run was a follow-up itself.
func TestFollowUpOfAJoinedSessionCarriesEveryTask(t *testing.T) {
	t.Parallel()
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "own-f1"}, Spec: farmv1.AgentRunSpec{
		Trigger: "Follow-up 1 of 3 (chain own). The previous session on this rig ended with WAIT.\nThe task it was working on:\nset a timer"}}
	run.Status.Joined = []farmv1.JoinedRun{
		{Name: "c1", Mode: farmv1.QueueModeCollect, Trigger: "check mail"},
		{Name: "s1", Mode: farmv1.QueueModeSteer, Trigger: "and mute it"},
	}
	next, _ := followup.NextOf(run)
	trigger := followup.WaitTrigger(sessionTask(run), next, "")
	for _, want := range []string{"1. (run own-f1) set a timer", "2. (run c1) check mail", "- From run s1: and mute it"} {
		if !strings.Contains(trigger, want) {
			t.Fatalf("the follow-up's trigger lacks %q:\n%s", want, trigger)
		}
	}
	if strings.Count(trigger, "The task it was working on:") != 1 {
		t.Fatalf("the follow-up's trigger nests an earlier preamble:\n%s", trigger)
	}
	alone := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Trigger: "alone"}}
	if sessionTask(alone) != alone {
		t.Fatal("a run nobody joined is its own task")
	}
}
