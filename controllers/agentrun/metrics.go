package agentrun

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// RunPhaseCollector reports runs by phase and leases held, read from the
// manager's cache at scrape time so the figures are never stale or drifting.
type RunPhaseCollector struct {
	Reader client.Reader
	runs   *prometheus.Desc
	leases *prometheus.Desc
}

// NewRunPhaseCollector returns a collector reading from r.
func NewRunPhaseCollector(r client.Reader) *RunPhaseCollector {
	return &RunPhaseCollector{
		Reader: r,
		runs:   prometheus.NewDesc("clawfarm_agentruns", "AgentRuns by phase.", []string{"phase"}, nil),
		leases: prometheus.NewDesc("clawfarm_rig_leases_held", "Rig leases currently held by AgentRuns.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RunPhaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.runs; ch <- c.leases }

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
	for i := range runs.Items {
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
}
