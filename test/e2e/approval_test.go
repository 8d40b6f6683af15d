//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/claw"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/engine/events"
)

// A ToolPolicy holds the tap on "Place Order" for a person: the session
// waits on the phone with nothing ordered, the run says AwaitingApproval
// with the call and the command that answers, kubectl claw approve answers
// it in the cluster user's name, and the same session places the order and
// ends DONE; the trace records who approved.
func TestApprovalHoldsTheOrder(t *testing.T) {
	onEachHost(t, rigApproval, rigKubeletApproval, approvalHoldsTheOrder)
}

func approvalHoldsTheOrder(t *testing.T, rigApproval int, sfx string) {
	ctx := ctxFor(t, runTimeout)
	policy := &farmv1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: devcluster.RunNamespace, Name: "e2e-orders-need-a-person" + sfx},
		Spec: farmv1.ToolPolicySpec{
			RunSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-approval" + sfx: "true"}},
			Rules: []farmv1.ToolRule{{Name: "place-order", Tools: []string{"tap"}, Action: farmv1.ToolApprove,
				Expression: `targets.exists(e, e.label.matches('(?i)place order'))`, Message: "an order costs money"}},
		}}
	if err := cluster.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.Delete(ctxFor(t, 30*time.Second), policy) })

	run := newRun("e2e-approval"+sfx, rigApproval, "shop", "Order one bag of coffee beans in the Shop app.")
	run.Labels = map[string]string{"e2e-approval" + sfx: "true"}
	create(t, run)
	held := waitRun(t, "e2e-approval"+sfx, runTimeout, "AwaitingApproval", func(r *farmv1.AgentRun) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, farmv1.ConditionAwaitingApproval)
	})
	c := meta.FindStatusCondition(held.Status.Conditions, farmv1.ConditionAwaitingApproval)
	for _, want := range []string{"tap {", "ToolPolicy e2e-orders-need-a-person" + sfx + ", rule place-order: an order costs money", "kubectl claw approve e2e-approval" + sfx} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("AwaitingApproval %q lacks %q", c.Message, want)
		}
	}
	time.Sleep(3 * time.Second) // the held call stays held
	if st := rigState(t, rigApproval); len(st.Shop.Orders) != 0 {
		t.Fatalf("ground truth: %d orders while the call waits for approval", len(st.Shop.Orders))
	}

	var out, errOut bytes.Buffer
	tty := false
	o := &claw.Options{TTY: &tty}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), &out, &errOut
	if code := o.Execute(ctx, []string{"--kubeconfig", cluster.Kubeconfig, "-n", devcluster.RunNamespace, "approve", "e2e-approval" + sfx}); code != 0 {
		t.Fatalf("kubectl claw approve: exit %d: %s%s", code, out.String(), errOut.String())
	}
	_, user, _ := strings.Cut(strings.TrimSpace(out.String()), " as ")
	if user == "" {
		t.Fatalf("kubectl claw approve said %q", out.String())
	}

	done := waitFinished(t, "e2e-approval"+sfx, farmv1.RunSucceeded)
	if done.Status.Sentinel != "DONE" || len(done.Status.Attempts) != 1 {
		t.Fatalf("sentinel %q, attempts %s: want DONE in the one session", done.Status.Sentinel, attemptsSummary(done))
	}
	if c := meta.FindStatusCondition(done.Status.Conditions, farmv1.ConditionAwaitingApproval); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("AwaitingApproval after the run: %+v", c)
	}
	if st := rigState(t, rigApproval); len(st.Shop.Orders) != 1 {
		t.Fatalf("ground truth: %d orders, want the one approved", len(st.Shop.Orders))
	}

	code, _, stream := traceGet(t, "/api/v1/runs/"+devcluster.RunNamespace+"/e2e-approval"+sfx+"/attempts/1/events")
	if code != http.StatusOK {
		t.Fatalf("trace events: %d", code)
	}
	var answered []events.Event
	sc := bufio.NewScanner(strings.NewReader(stream))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev events.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == events.TypeApprovalAnswered {
			answered = append(answered, ev)
		}
	}
	if len(answered) != 1 || answered[0].By != user || answered[0].Approved == nil || !*answered[0].Approved || answered[0].Tool != "tap" {
		t.Fatalf("the trace's approval_answered: %+v, want one approval by %s", answered, user)
	}
	rigFree(t, rigApproval)
}
