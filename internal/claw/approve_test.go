package claw

import (
	"strings"
	"testing"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func holding(id string) func(*farmv1.AgentRunStatus, int64) {
	return func(st *farmv1.AgentRunStatus, gen int64) {
		running("iphone-01", 1)(st, gen)
		st.Progress = &farmv1.RunProgress{Attempt: 1, Turn: 7, Approval: &farmv1.ApprovalRequest{
			ID: id, Tool: "tap", Args: `{"bbox":[0.4,0.81,0.6,0.85]}`, Policy: "shop", Rule: "pay", Turn: 7}}
	}
}

// approve and deny answer the open request, in the caller's own name as the
// API server knows it, with the request's id; without an open request they
// change nothing and say so.
func TestApproveAndDeny(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	newRun(t, ns, "buyer")
	operator(t, ns, "buyer", holding("a1-t7-1"))
	c := claw(t, ns, nil, nil, "approve", "buyer")
	if c.code != 0 || !strings.Contains(c.out.String(), "approved tap on turn 7 (request a1-t7-1) as ") {
		t.Fatalf("approve: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	ann := getRun(t, ns, "buyer").Annotations
	user := ann[contract.AnnotationApprovedBy]
	if ann[contract.AnnotationApproval] != "Approve/a1-t7-1" || user == "" || !strings.HasSuffix(strings.TrimSpace(c.out.String()), " as "+user) {
		t.Fatalf("annotations %v", ann)
	}
	if _, ok := ann[contract.AnnotationApprovalReason]; ok {
		t.Errorf("an approval without --reason leaves no reason: %v", ann)
	}

	// The next request is denied with a reason; the earlier answer is replaced.
	operator(t, ns, "buyer", holding("a1-t9-2"))
	c = claw(t, ns, nil, nil, "deny", "buyer", "--reason", "wrong card")
	if c.code != 0 || !strings.Contains(c.out.String(), "denied tap") {
		t.Fatalf("deny: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	ann = getRun(t, ns, "buyer").Annotations
	if ann[contract.AnnotationApproval] != "Deny/a1-t9-2" || ann[contract.AnnotationApprovalReason] != "wrong card" || ann[contract.AnnotationApprovedBy] != user {
		t.Fatalf("annotations %v", ann)
	}

	newRun(t, ns, "idle")
	operator(t, ns, "idle", running("iphone-01", 1))
	c = claw(t, ns, nil, nil, "approve", "idle")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "no tool call waiting for approval") {
		t.Errorf("nothing to approve: exit %d, stderr %q", c.code, c.errOut)
	}
	if _, ok := getRun(t, ns, "idle").Annotations[contract.AnnotationApproval]; ok {
		t.Error("an answer was written with no request open")
	}
}
