//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

// A model account capped at 2 sessions (farm.clawfarm.dev/max-sessions on
// its key Secret), 6 runs with its key on 6 free rigs. The ground truth is
// the rigs' own session ledgers and modelsim's count of that key's
// requests, not the operator's Leases: never more than 2 sessions at once,
// the cap reached, every run Succeeded with its timer started, the later
// runs waited with ModelAccountBusy, and they started in the order they
// were made (those that waited).
func TestModelAccountCap(t *testing.T) {
	t.Parallel()
	const key, secretName = "e2e-capped-account-key", "e2e-capped-key"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devcluster.RunNamespace, Name: secretName,
		Labels: map[string]string{admission.LabelModelKey: "true"}, Annotations: map[string]string{farmv1.AnnotationMaxSessions: "2"}},
		StringData: map[string]string{"api-key": key}}
	if err := cluster.Client.Create(ctxFor(t, 30*time.Second), secret); err != nil {
		t.Fatal(err)
	}
	rigs := []int{rigCap0, rigCap1, rigCap2, rigCap3, rigCap4, rigCap5}
	name := func(i int) string { return fmt.Sprintf("e2e-cap-%d", i) }
	for _, r := range rigs {
		setFaults(t, r, slowTaps) // about 25 s a session: long enough to overlap
	}
	for i, r := range rigs {
		run := newRun(name(i), r, "timer", "Set a 5 minute timer in the Clock app and start it.")
		run.Spec.Model.APIKeySecretRef.Name = secretName
		create(t, run)
	}
	for i, r := range rigs {
		run := waitFinished(t, name(i), farmv1.RunSucceeded)
		if len(run.Status.Attempts) != 1 {
			t.Errorf("%s: attempts %s, want one", run.Name, attemptsSummary(run))
		}
		if st := rigState(t, r); !timerStarted(st) {
			t.Errorf("%s: the phone's timer %+v, want started", run.Name, st.Timer)
		}
		clearFaults(t, r)
	}

	// The rigs' ledgers: each session from its first tool call to its last.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for i, r := range rigs {
		n := 0
		for _, s := range simState(t, r).Sessions {
			if strings.HasPrefix(s.Run, devcluster.RunNamespace+"/e2e-cap-") { // the loop names its run namespace/name
				edges = append(edges, edge{s.FirstCall, 1}, edge{s.LastCall, -1})
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s's rig recorded no session of its run", name(i))
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta > edges[j].delta // touching counts as at once
	})
	live, most := 0, 0
	for _, e := range edges {
		live += e.delta
		most = max(most, live)
	}
	if most != 2 {
		t.Errorf("the rigs' ledgers show at most %d sessions at once, want the cap, 2", most)
	}

	// The model's side: the key's requests, never more than the cap at once.
	resp, err := http.Get(strings.TrimSuffix(cluster.ModelBaseURL(), "/v1") + "/api/sim/accounts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var accounts map[string]modelsim.Account
	if err := json.NewDecoder(resp.Body).Decode(&accounts); err != nil {
		t.Fatal(err)
	}
	acct := accounts[modelsim.AccountID(key)]
	if acct.Requests < len(rigs) || acct.MaxInFlight < 1 || acct.MaxInFlight > 2 {
		t.Errorf("modelsim saw %+v for the capped key, want at least %d requests and at most 2 at once", acct, len(rigs))
	}

	// Made in name order within a second or two: the runs that waited for
	// the account (all but the first two, which found free slots together
	// and start in whatever order their reconciles run) get their pods in
	// that order.
	var prev time.Time
	for i := 2; i < len(rigs); i++ {
		var pod corev1.Pod
		if err := cluster.Client.Get(ctxFor(t, 10*time.Second), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: name(i) + "-a1"}, &pod); err != nil {
			t.Fatal(err)
		}
		if at := pod.CreationTimestamp.Time; at.Before(prev) {
			t.Errorf("%s's pod was made at %s, before the older run's (%s)", name(i), at.Format(time.RFC3339), prev.Format(time.RFC3339))
		} else {
			prev = at
		}
	}
	var events corev1.EventList
	if err := cluster.Client.List(ctxFor(t, 10*time.Second), &events, client.InNamespace(devcluster.RunNamespace)); err != nil {
		t.Fatal(err)
	}
	busy := false
	for _, e := range events.Items {
		busy = busy || (e.InvolvedObject.Name == name(5) && e.Reason == farmv1.ReasonModelAccountBusy && strings.Contains(e.Message, "waiting for model account "+secretName))
	}
	if !busy {
		t.Errorf("no %s Event says %s waited for model account %s", farmv1.ReasonModelAccountBusy, name(5), secretName)
	}
	t.Logf("at most %d sessions at once on the rigs; modelsim: %d requests, at most %d at once", most, acct.Requests, acct.MaxInFlight)
}
