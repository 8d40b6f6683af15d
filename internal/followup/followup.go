// Package followup turns WAIT sentinels and agent-created jobs into CronJobs
// whose Jobs create AgentRuns, and holds `manager followup`, the one-shot
// command those Jobs run.
package followup

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// MaxTriggerBytes matches the CRD's bound on spec.trigger.
const MaxTriggerBytes = 16384

// ChainOf returns the chain root and position of a run (position 0 for a run
// that is not a follow-up).
func ChainOf(run *farmv1.AgentRun) (root string, chain int32) {
	root = run.Labels[farmv1.LabelChainRoot]
	if root == "" {
		return run.Name, 0
	}
	var n int32
	if _, err := fmt.Sscanf(run.Annotations[farmv1.AnnotationChain], "%d", &n); err != nil {
		return root, 0
	}
	return root, n
}

// Next describes the follow-up a WAIT asks for.
type Next struct {
	Name  string
	Chain int32
	Root  string
}

// NextOf returns the follow-up that a WAIT of run would create, and whether
// the chain limit allows it.
func NextOf(run *farmv1.AgentRun) (Next, bool) {
	root, chain := ChainOf(run)
	n := Next{Name: ChildName(root, chain+1), Chain: chain + 1, Root: root}
	return n, chain+1 <= run.Spec.FollowUp.ChainLimit()
}

// WaitTrigger is the opening message of a WAIT follow-up: it carries the
// parent's recap and what the agent asked to check.
func WaitTrigger(parent *farmv1.AgentRun, n Next, context string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Follow-up %d of %d (chain %s). The previous session on this rig ended with WAIT.\n",
		n.Chain, parent.Spec.FollowUp.ChainLimit(), n.Root)
	if parent.Status.Recap != "" {
		fmt.Fprintf(&b, "Its recap: %s\n", parent.Status.Recap)
	}
	if context != "" {
		fmt.Fprintf(&b, "What it asked you to check now: %s\n", context)
	}
	fmt.Fprintf(&b, "The task it was working on:\n%s", OriginalTask(parent))
	// The recap and the context are the model's words: a NUL in them would
	// make the follow-up a run the API server refuses (a trigger reaches
	// the loop as an environment variable, which cannot hold one).
	return Clip(strings.ReplaceAll(b.String(), "\x00", ""), MaxTriggerBytes)
}

// OriginalTask strips earlier follow-up preambles so chains do not nest triggers.
func OriginalTask(run *farmv1.AgentRun) string {
	t := run.Spec.Trigger
	const marker = "The task it was working on:\n"
	if i := strings.LastIndex(t, marker); i >= 0 {
		return t[i+len(marker):]
	}
	return t
}

// ChildRun builds the follow-up AgentRun: the parent's spec with a new
// trigger, labelled with the chain, the parent and the parent's UID, and in
// the parent's pool (its shard).
func ChildRun(parent *farmv1.AgentRun, n Next, trigger string) *farmv1.AgentRun {
	spec := *parent.Spec.DeepCopy()
	spec.Cancel = false
	spec.Trigger = trigger
	return &farmv1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: parent.Namespace,
			Name:      n.Name,
			Labels: farmv1.CarryPool(map[string]string{farmv1.LabelChainRoot: n.Root, farmv1.LabelParent: parent.Name,
				farmv1.LabelParentUID: string(parent.UID)}, parent.Labels),
			Annotations: map[string]string{farmv1.AnnotationChain: fmt.Sprint(n.Chain)},
		},
		Spec: spec,
	}
}

// Delay is how long after a WAIT its follow-up fires: what the agent asked
// for (the termination message's followUp.afterMinutes), else the run's
// spec.followUp.defaultDelayMinutes. The loop reports 0 when the agent did
// not choose, so this is the rule's one home.
func Delay(run *farmv1.AgentRun, m *contract.TerminationMessage) time.Duration {
	if m != nil && m.FollowUp != nil && m.FollowUp.AfterMinutes > 0 {
		return time.Duration(m.FollowUp.AfterMinutes) * time.Minute
	}
	return run.Spec.FollowUp.Delay()
}

// FireTime is when a follow-up after delay fires: the start of the minute at
// or after finish+delay (CronJobs have minute resolution).
func FireTime(finish time.Time, delay time.Duration) time.Time {
	t := finish.Add(delay).UTC()
	if t.Truncate(time.Minute).Equal(t) {
		return t
	}
	return t.Truncate(time.Minute).Add(time.Minute)
}

// PinnedSchedule is the cron schedule that fires at exactly t's minute (UTC).
func PinnedSchedule(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%d %d %d %d *", t.Minute(), t.Hour(), t.Day(), int(t.Month()))
}

// Request is what a follow-up Job asks `manager followup` to create, and
// who asked. It travels in the Job's environment as JSON; the command checks
// the parent (and an agent job's rig) on the API server before it creates
// the run (see Create).
type Request struct {
	// Kind is farmv1.KindFollowUp (a WAIT follow-up) or farmv1.KindAgentJob.
	Kind string `json:"kind,omitempty"`
	// Run is the AgentRun to create. For agent jobs its name is a prefix;
	// the Job's name makes it unique per firing.
	Run *farmv1.AgentRun `json:"run"`
	// NameFromJob appends the firing's minute (from the Job's name) to Run's name.
	NameFromJob bool `json:"nameFromJob,omitempty"`
	// DeleteCronJob, when set, names the CronJob to delete once the run exists
	// (one-time agent jobs fire once).
	DeleteCronJob string `json:"deleteCronJob,omitempty"`
	// CronJob names the CronJob whose Jobs carry this request.
	CronJob string `json:"cronJob,omitempty"`
	// Parent is the run that asked: the run that ended WAIT, or the run whose
	// agent created the job.
	Parent *Ref `json:"parent,omitempty"`
	// Rig is the rig an agent job's runs are pinned to, which owns its CronJob.
	Rig *Ref `json:"rig,omitempty"`
	// Expires is when an agent job stops making runs.
	Expires *metav1.Time `json:"expires,omitempty"`
}

// Ref names an object and the UID it had when the request was made: an
// object of that name with another UID is another object.
type Ref struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// EncodeRequest renders a request for the Job's environment.
func EncodeRequest(r Request) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode follow-up request: %w", err)
	}
	return string(b), nil
}

// DecodeRequest parses and checks a request.
func DecodeRequest(s string) (Request, error) {
	var r Request
	if strings.TrimSpace(s) == "" {
		return r, fmt.Errorf("%s is empty: the follow-up Job must carry the run to create", EnvRequest)
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("%s is not a follow-up request: %w", EnvRequest, err)
	}
	if r.Run == nil || r.Run.Name == "" || r.Run.Namespace == "" {
		return r, fmt.Errorf("%s names no run (want run.metadata.namespace and run.metadata.name)", EnvRequest)
	}
	return r, nil
}

// Clip cuts s to at most n bytes on a UTF-8 boundary.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1]&0x80 != 0 {
		s = s[:len(s)-1]
	}
	return s
}

// RequestOf reads the request a follow-up or agent-job CronJob's Jobs carry.
func RequestOf(cj *batchv1.CronJob) (Request, error) {
	for _, c := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == EnvRequest {
				return DecodeRequest(e.Value)
			}
		}
	}
	return Request{}, fmt.Errorf("CronJob %s carries no %s", cj.Name, EnvRequest)
}
