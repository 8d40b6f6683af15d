package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// What Prometheus stores of a scrape of the manager, and the check of the
// chart's queries against it: every metric a query reads is in the scrape,
// every label it names is one those series carry once scraped, and every
// value it matches is one they carry (or, for a value this scrape did not
// happen to show, one the operator sets).

// The label values the operator sets, by metric and label: what a query may
// match that a scrape shows only once it has happened.
var (
	runPhases = []string{string(farmv1.RunPending), string(farmv1.RunQueued), string(farmv1.RunRunning), string(farmv1.RunRetrying),
		string(farmv1.RunWaiting), string(farmv1.RunSucceeded), string(farmv1.RunFailed), string(farmv1.RunCancelled)}
	rigPhases = []string{string(farmv1.RigReady), string(farmv1.RigInUse), string(farmv1.RigNotReady), string(farmv1.RigOffline),
		string(farmv1.RigMaintenance)}
	attemptOutcomes = []string{farmv1.OutcomeDone, farmv1.OutcomeFail, farmv1.OutcomeWait, farmv1.OutcomeIdle, farmv1.OutcomeStuck,
		farmv1.OutcomeBudget, farmv1.OutcomeNotRetryable, farmv1.OutcomeInvalidConfig, farmv1.OutcomeInfrastructure,
		farmv1.OutcomeCancelled, farmv1.OutcomeStalled}
	operatorValues = map[string]map[string][]string{
		"clawfarm_agentruns":                {"phase": runPhases},
		"clawfarm_agentruns_finished_total": {"phase": runPhases},
		"clawfarm_rigs":                     {"phase": rigPhases},
		"clawfarm_attempts_total":           {"outcome": attemptOutcomes},
	}
)

// standardTargetLabels are the labels prometheus-operator gives every target
// of a ServiceMonitor. They name the manager's pod, not what the operator
// reports: a series' own label of the same name is renamed exported_<name>
// unless the endpoint honours labels, and a query may not stand on them (a
// `sum by (namespace)` on a series without its own namespace groups by the
// manager's namespace).
var standardTargetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// scrape is what Prometheus stores of one scrape, as the queries see it.
type scrape struct {
	// labels are, by metric name, the labels every one of its series carries.
	labels map[string]map[string]bool
	// values are, by metric name and label, the values its series carry.
	values map[string]map[string]map[string]bool
}

// decodeScrape reads a /metrics response body in its format.
func decodeScrape(r io.Reader, format expfmt.Format) ([]*dto.MetricFamily, error) {
	dec := expfmt.NewDecoder(r, format)
	var fams []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			return fams, nil
		} else if err != nil {
			return nil, err
		}
		fams = append(fams, mf)
	}
}

var labelNameInvalid = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// storedScrape is fams as Prometheus stores them: histograms as their
// _bucket (with le), _sum and _count series; without honorLabels a series'
// own label that a target label shadows renamed exported_<name>; and the
// ServiceMonitor's podTargetLabels (pod labels, their names sanitized) on
// every series.
func storedScrape(t *testing.T, fams []*dto.MetricFamily, honorLabels bool, podTargetLabels []string) scrape {
	t.Helper()
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, fams...)
	if err != nil {
		t.Fatal(err)
	}
	s := scrape{labels: map[string]map[string]bool{}, values: map[string]map[string]map[string]bool{}}
	for _, smp := range samples {
		name := string(smp.Metric[model.MetricNameLabel])
		have := map[string]string{}
		for k, v := range smp.Metric {
			if k == model.MetricNameLabel {
				continue
			}
			if !honorLabels && slices.Contains(standardTargetLabels, string(k)) {
				k = "exported_" + k
			}
			have[string(k)] = string(v)
		}
		for _, l := range podTargetLabels {
			if l := labelNameInvalid.ReplaceAllString(l, "_"); have[l] == "" {
				have[l] = "(the pod's)"
			}
		}
		if s.values[name] == nil {
			s.values[name] = map[string]map[string]bool{}
			s.labels[name] = map[string]bool{}
			for l := range have {
				s.labels[name][l] = true
			}
		}
		for l := range s.labels[name] {
			if _, ok := have[l]; !ok {
				delete(s.labels[name], l) // carried by every series, or not at all
			}
		}
		for l, v := range have {
			if s.values[name][l] == nil {
				s.values[name][l] = map[string]bool{}
			}
			s.values[name][l][v] = true
		}
	}
	return s
}

// has says whether the scrape shows metric with label=value.
func (s scrape) has(metric, label, value string) bool { return s.values[metric][label][value] }

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkQuery checks one of the chart's queries (where names it) against s:
// problems are what fails; notes, the values it matches that s does not
// show but the operator sets.
func checkQuery(where, expr string, s scrape) (problems, notes []string) {
	q, err := parsePromQL(expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %q does not parse: %v", where, expr, err)}, nil
	}
	if len(q.Metrics) == 0 {
		problems = append(problems, fmt.Sprintf("%s: %q reads no metric", where, expr))
	}
	missing := map[string]bool{}
	for _, m := range q.Metrics {
		if s.labels[m] == nil && !missing[m] {
			missing[m] = true
			problems = append(problems, fmt.Sprintf("%s: %q reads %s, which the manager's /metrics does not serve", where, expr, m))
		}
	}
	carried := func(m, l string) bool { return missing[m] || s.labels[m][l] }
	for _, u := range q.Uses {
		for _, l := range u.Labels {
			var lack []string
			for _, m := range u.Metrics {
				if !carried(m, l) {
					lack = append(lack, fmt.Sprintf("%s (labels: %s)", m, strings.Join(sortedKeys(s.labels[m]), ", ")))
				}
			}
			if len(lack) > 0 && (!u.Any || len(lack) == len(u.Metrics)) {
				problems = append(problems, fmt.Sprintf("%s: %q names %s in %s (...), a label the scraped series lack: %s",
					where, expr, l, u.Clause, strings.Join(lack, "; ")))
			}
		}
	}
	for _, mt := range q.Matchers {
		if missing[mt.Metric] {
			continue
		}
		if mt.Value != "" && !carried(mt.Metric, mt.Label) {
			problems = append(problems, fmt.Sprintf("%s: %q matches %s%s%q, a label the scraped %s lacks (labels: %s)",
				where, expr, mt.Label, mt.Op, mt.Value, mt.Metric, strings.Join(sortedKeys(s.labels[mt.Metric]), ", ")))
			continue
		}
		for _, v := range mt.Values() {
			switch {
			case s.has(mt.Metric, mt.Label, v):
			case slices.Contains(operatorValues[mt.Metric][mt.Label], v):
				notes = append(notes, fmt.Sprintf("%s: %s{%s=%q} is not in this scrape; the operator sets it", where, mt.Metric, mt.Label, v))
			default:
				problems = append(problems, fmt.Sprintf("%s: %q matches %s=%q, a value %s never carries (the scrape shows %s)",
					where, expr, mt.Label, v, mt.Metric, strings.Join(sortedKeys(s.values[mt.Metric][mt.Label]), ", ")))
			}
		}
	}
	return problems, notes
}

// The check fails what Prometheus would not find: a label the series lack,
// one renamed exported_<name> by the scrape, a value they never carry, a
// metric not served; and passes the pod's own target labels.
func TestCheckQueryAgainstAScrape(t *testing.T) {
	t.Parallel()
	const exposition = `# TYPE clawfarm_tokens_total counter
clawfarm_tokens_total{kind="input",model="m",namespace="team"} 3
# TYPE clawfarm_agentruns gauge
clawfarm_agentruns{phase="Queued"} 1
clawfarm_agentruns{phase="Running"} 0
# TYPE clawfarm_queue_wait_seconds histogram
clawfarm_queue_wait_seconds_bucket{le="1"} 1
clawfarm_queue_wait_seconds_bucket{le="+Inf"} 1
clawfarm_queue_wait_seconds_sum 0.5
clawfarm_queue_wait_seconds_count 1
`
	fams, err := decodeScrape(strings.NewReader(exposition), expfmt.NewFormat(expfmt.TypeTextPlain))
	if err != nil {
		t.Fatal(err)
	}
	shard := []string{"farm.clawfarm.dev/shard"}
	honoured, renamed := storedScrape(t, fams, true, shard), storedScrape(t, fams, false, shard)
	for _, c := range []struct {
		expr    string
		s       scrape
		problem string // "" when it passes
	}{
		{`sum by (namespace, kind) (rate(clawfarm_tokens_total[5m]))`, honoured, ""},
		{`sum by (namespace, kind) (rate(clawfarm_tokens_total[5m]))`, renamed, "names namespace in by (...)"},
		{`sum by (exported_namespace) (rate(clawfarm_tokens_total[5m]))`, honoured, "names exported_namespace"},
		{`sum by (namespace) (clawfarm_agentruns)`, honoured, "names namespace in by (...)"},
		{`sum by (phase) (max by (phase, farm_clawfarm_dev_shard) (clawfarm_agentruns{phase=~"Queued|Running"}))`, honoured, ""},
		{`clawfarm_agentruns{phase="Queud"}`, honoured, `matches phase="Queud", a value clawfarm_agentruns never carries`},
		{`clawfarm_agentruns{phase="Failed"}`, honoured, ""}, // not shown, but the operator sets it: a note
		{`clawfarm_agentruns{state="Queued"}`, honoured, "a label the scraped clawfarm_agentruns lacks"},
		{`histogram_quantile(0.9, sum by (le) (rate(clawfarm_queue_wait_seconds_bucket[5m])))`, honoured, ""},
		{`sum by (le) (rate(clawfarm_queue_wait_seconds_count[5m]))`, honoured, "names le"},
		{`sum(rate(clawfarm_queue_wait_total[5m]))`, honoured, "does not serve"},
	} {
		problems, _ := checkQuery("q", c.expr, c.s)
		got := strings.Join(problems, "\n")
		if c.problem == "" && got != "" || c.problem != "" && !strings.Contains(got, c.problem) {
			t.Errorf("%s: problems %q, want %q", c.expr, got, c.problem)
		}
	}
}
