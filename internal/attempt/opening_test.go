package attempt

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// A run no other run joined opens with its trigger; once runs joined, every
// task is numbered with its run's name and the steer messages follow, all of
// them in a fresh attempt, with their count for --steered.
func TestOpeningNumbersEveryJoinedTrigger(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "own"}, Spec: farmv1.AgentRunSpec{Trigger: "set a timer"}}
	if text, n := Opening(run); text != "set a timer" || n != 0 {
		t.Fatalf("alone: %q, %d", text, n)
	}
	run.Status.Joined = []farmv1.JoinedRun{
		{Name: "c1", Mode: farmv1.QueueModeCollect, Trigger: "check mail"},
		{Name: "s1", Mode: farmv1.QueueModeSteer, Trigger: "and mute it"},
		{Name: "c2", Mode: farmv1.QueueModeCollect, Trigger: "read the news"},
		{Name: "s2", Mode: farmv1.QueueModeSteer, Trigger: "then lock the phone"},
	}
	text, n := Opening(run)
	if n != 2 {
		t.Fatalf("%d steer messages, want 2", n)
	}
	at := -1
	for _, want := range []string{"serves 3 runs", "1. (run own) set a timer", "2. (run c1) check mail", "3. (run c2) read the news",
		"- From run s1: and mute it", "- From run s2: then lock the phone"} {
		i := strings.Index(text, want)
		if i <= at {
			t.Fatalf("%q missing or out of order in:\n%s", want, text)
		}
		at = i
	}
	big := farmv1.JoinedRun{Name: "big", Mode: farmv1.QueueModeCollect, Trigger: strings.Repeat("x", MaxOpeningBytes)}
	if OpeningFits(run, big) {
		t.Fatal("a trigger past MaxOpeningBytes fits")
	}
	if !OpeningFits(run, farmv1.JoinedRun{Name: "c3", Mode: farmv1.QueueModeCollect, Trigger: "one more"}) {
		t.Fatal("a small trigger does not fit")
	}
}
