package admission_test

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func annotate(ann map[string]any) client.Patch {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return client.RawPatch(types.MergePatchType, body)
}

// An approval answer names its author as the API server knows them: a run
// editor answers in their own name only, in the form the loop reads; other
// annotations are none of the policy's business.
func TestApprovalAnswerNamesItsAuthor(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	makeRun(t, ns, "buyer", farmv1.RunRunning)
	name := "alice-" + ns

	const notYou = "an approval answer names who gave it"
	inForce(t, "clawfarm-approval", notYou, func() error {
		return alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
			contract.AnnotationApproval: "Approve/a1-t4-1", contract.AnnotationApprovedBy: "bob"}))
	})
	refused(t, "an answer with no author", alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
		contract.AnnotationApproval: "Approve/a1-t4-1"})), notYou)
	refused(t, "an answer the loop cannot read", alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
		contract.AnnotationApproval: "yes please", contract.AnnotationApprovedBy: name})), "is Approve/<id> or Deny/<id>")
	allowed(t, "alice approves as herself", alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
		contract.AnnotationApproval: "Approve/a1-t4-1", contract.AnnotationApprovedBy: name})))
	bind(t, ns, "clawfarm-run-editor", user("bob-"+ns))
	bob := as(t, identity{user: "bob-" + ns})
	refused(t, "bob rewrites the reason of alice's answer", bob.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
		contract.AnnotationApprovalReason: "because"})), notYou)
	allowed(t, "alice denies the next request with a reason", alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{
		contract.AnnotationApproval: "Deny/a1-t9-2", contract.AnnotationApprovedBy: name, contract.AnnotationApprovalReason: "wrong card"})))
	allowed(t, "an unrelated annotation beside an answer", alice.Patch(ctx, runRef(ns, "buyer"), annotate(map[string]any{"team": "shop"})))
}
