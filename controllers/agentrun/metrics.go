package agentrun

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// Every metric of the AgentRun controller, declared once. Labels are low
// cardinality: phases, sentinels and outcome classes, never a run's or a
// pod's name; the token and cost counters add the namespace and the model.
var (
	runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_agentruns_finished_total",
		Help: "AgentRuns that reached a final phase (or Waiting), by phase and sentinel.",
	}, []string{"phase", "sentinel"})
	attemptsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_attempts_total",
		Help: "Attempt pods whose outcome was recorded, by outcome class.",
	}, []string{"outcome"})
	tokensTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_tokens_total",
		Help: "Tokens of recorded attempts, by namespace, model and kind: input (uncached), cached_input, cache_write, output.",
	}, []string{"namespace", "model", "kind"})
	costTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_cost_usd_total",
		Help: "What recorded attempts cost in USD, by namespace and model (priced attempts only).",
	}, []string{"namespace", "model"})
	queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "clawfarm_queue_wait_seconds",
		Help:    "Time from an AgentRun's creation to its rig lease.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
	timeToPod = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "clawfarm_time_to_pod_seconds",
		Help:    "Time from an AgentRun's creation to its first attempt pod.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
)

func init() {
	metrics.Registry.MustRegister(runsFinished, attemptsEnded, tokensTotal, costTotal, queueWait, timeToPod)
}

// RunPhaseCollector reports runs by phase, leases held, and each capped
// model account's sessions and queue, read from the manager's cache at
// scrape time so the figures are never stale or drifting.
type RunPhaseCollector struct {
	Reader client.Reader
	runs   *prometheus.Desc
	leases *prometheus.Desc
	// sessions and queued are per model account (its namespace and key
	// Secret): the slots held, and the runs waiting for one (account.go).
	sessions *prometheus.Desc
	queued   *prometheus.Desc
}

// NewRunPhaseCollector returns a collector reading from r.
func NewRunPhaseCollector(r client.Reader) *RunPhaseCollector {
	return &RunPhaseCollector{
		Reader: r,
		runs:   prometheus.NewDesc("clawfarm_agentruns", "AgentRuns by phase.", []string{"phase"}, nil),
		leases: prometheus.NewDesc("clawfarm_rig_leases_held", "Rig leases currently held by AgentRuns.", nil, nil),
		sessions: prometheus.NewDesc("clawfarm_model_account_sessions",
			"Sessions a capped model account (its key Secret) has: the slots its runs hold.", []string{"namespace", "secret"}, nil),
		queued: prometheus.NewDesc("clawfarm_model_account_queued",
			"AgentRuns waiting for a session of their capped model account (ModelAccountBusy).", []string{"namespace", "secret"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RunPhaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.leases
	ch <- c.sessions
	ch <- c.queued
}

// Collect implements prometheus.Collector.
func (c *RunPhaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var runs farmv1.AgentRunList
	if err := c.Reader.List(ctx, &runs); err != nil {
		return
	}
	counts := map[farmv1.RunPhase]int{}
	for _, p := range []farmv1.RunPhase{farmv1.RunPending, farmv1.RunQueued, farmv1.RunRunning, farmv1.RunRetrying,
		farmv1.RunWaiting, farmv1.RunSucceeded, farmv1.RunFailed, farmv1.RunCancelled} {
		counts[p] = 0
	}
	held := 0
	type account struct{ namespace, secret string }
	sessions, queued := map[account]int{}, map[account]int{}
	for i := range runs.Items {
		if run := &runs.Items[i]; accountBlocked(run) && run.WaitsForRig() && run.Spec.Model.APIKeySecretRef != nil {
			queued[account{run.Namespace, run.Spec.Model.APIKeySecretRef.Name}]++
		}
		p := runs.Items[i].Status.Phase
		if p == "" {
			p = farmv1.RunPending
		}
		counts[p]++
		if conditions.IsTrue(runs.Items[i].Status.Conditions, farmv1.ConditionRigLeased) {
			held++
		}
	}
	for p, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), string(p))
	}
	ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(held))
	var slots coordinationv1.LeaseList
	if err := c.Reader.List(ctx, &slots, client.MatchingLabels{farmv1.LabelKind: farmv1.KindModelAccountSlot}); err != nil {
		return
	}
	for i := range slots.Items {
		if l := &slots.Items[i]; l.DeletionTimestamp == nil {
			sessions[account{l.Namespace, l.Annotations[farmv1.AnnotationModelAccount]}]++
		}
	}
	for a := range queued {
		if _, ok := sessions[a]; !ok {
			sessions[a] = 0 // an account whose runs all wait has no session
		}
	}
	for a, n := range sessions {
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(n), a.namespace, a.secret)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(queued[a]), a.namespace, a.secret)
	}
}
