package main

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A small reader of the PromQL the chart's dashboard and alerts use: which
// series a query reads, which labels it names and where, and the values it
// matches. Prometheus's own parser lives in the Prometheus server's module,
// whose long list of requirements would join go.mod for one test; the
// queries are plain enough for a tokenizer that knows the scopes of the
// grouping and matching clauses.

// promQLQuery is what one expression says of the series it reads.
type promQLQuery struct {
	// Metrics are the metric names of its selectors, in order.
	Metrics []string
	// Uses are the labels it names outside matchers, each with the metrics
	// that must carry them.
	Uses []promQLUse
	// Matchers are its selectors' label matchers.
	Matchers []promQLMatcher
}

// promQLUse is a grouping or matching clause: its labels, and the metrics
// in its scope (an aggregation's argument; a binary operation's operands,
// taken as the enclosing parentheses).
type promQLUse struct {
	Clause  string // by, without, on, ignoring, group_left or group_right
	Labels  []string
	Metrics []string
	// Any: one metric of the scope carrying each label suffices (the "one"
	// side of group_left and group_right, whose labels are copied over).
	Any bool
}

// promQLMatcher is one label matcher of a selector.
type promQLMatcher struct {
	Metric, Label, Op, Value string
}

// Values are the label values the matcher names: its value, or each
// alternative of a regular expression that is only alternatives of literal
// words; nil when it names none it can be checked against (an empty value,
// which matches a missing label, or a pattern).
func (m promQLMatcher) Values() []string {
	if m.Value == "" {
		return nil
	}
	if m.Op == "=" || m.Op == "!=" {
		return []string{m.Value}
	}
	if !promQLAlternatives.MatchString(m.Value) {
		return nil
	}
	return strings.Split(m.Value, "|")
}

var promQLAlternatives = regexp.MustCompile(`^[A-Za-z0-9_.-]+(\|[A-Za-z0-9_.-]+)*$`)

var (
	promQLAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
		"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true}
	promQLKeywordSet = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
	promQLClauses = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

type promQLToken struct {
	kind string // ident, string, number, var, range, matchers, punct
	text string
}

// promQLTokens splits expr into tokens; a range or subquery ([…]) is one
// token, and so is a selector's matcher block ({…}), kept whole.
func promQLTokens(expr string) ([]promQLToken, error) {
	var out []promQLToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, err := promQLStringEnd(expr, i)
			if err != nil {
				return nil, err
			}
			out = append(out, promQLToken{"string", expr[i:j]})
			i = j
		case c == '[' || c == '{':
			end := byte(']')
			if c == '{' {
				end = '}'
			}
			j := i + 1
			for j < len(expr) && expr[j] != end {
				if q := expr[j]; q == '"' || q == '\'' || q == '`' {
					k, err := promQLStringEnd(expr, j)
					if err != nil {
						return nil, err
					}
					j = k
					continue
				}
				j++
			}
			if j == len(expr) {
				return nil, fmt.Errorf("unclosed %c at %d", c, i)
			}
			kind := "range"
			if c == '{' {
				kind = "matchers"
			}
			out = append(out, promQLToken{kind, expr[i+1 : j]})
			i = j + 1
		case c == '$':
			j := i + 1
			for j < len(expr) && promQLIdentByte(expr[j], false) {
				j++
			}
			out = append(out, promQLToken{"var", expr[i:j]})
			i = j
		case promQLIdentByte(c, true):
			j := i + 1
			for j < len(expr) && promQLIdentByte(expr[j], false) {
				j++
			}
			out = append(out, promQLToken{"ident", expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i + 1
			for j < len(expr) && (promQLIdentByte(expr[j], false) || expr[j] == '.' ||
				(expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E')) {
				j++
			}
			out = append(out, promQLToken{"number", expr[i:j]})
			i = j
		default:
			out = append(out, promQLToken{"punct", string(c)})
			i++
		}
	}
	return out, nil
}

func promQLIdentByte(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// promQLStringEnd is the index just past the string literal opening at i.
func promQLStringEnd(expr string, i int) (int, error) {
	q := expr[i]
	for j := i + 1; j < len(expr); j++ {
		switch {
		case expr[j] == '\\' && q != '`':
			j++
		case expr[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d", i)
}

var promQLMatcherRE = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)\s*(,|$)`)

// parsePromQL reads expr's selectors, matchers and clauses.
func parsePromQL(expr string) (promQLQuery, error) {
	toks, err := promQLTokens(expr)
	if err != nil {
		return promQLQuery{}, err
	}
	var q promQLQuery
	// A group is a pair of parentheses (the whole expression is one too):
	// the metrics inside it, and the clauses that apply to all of them.
	type group struct {
		metrics []string
		uses    []promQLUse
	}
	stack := []*group{{}}
	var lastClosed *group
	var pending []promQLUse // a clause before its aggregation's argument
	closeGroup := func(g *group) {
		for _, u := range g.uses {
			u.Metrics = g.metrics
			q.Uses = append(q.Uses, u)
		}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := func(k int) promQLToken {
			if i+k < len(toks) {
				return toks[i+k]
			}
			return promQLToken{}
		}
		switch {
		case t.kind == "ident" && promQLClauses[t.text]:
			use := promQLUse{Clause: t.text, Any: strings.HasPrefix(t.text, "group_")}
			at := i
			if next(1).text == "(" {
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
					switch {
					case toks[j].kind == "ident" || toks[j].kind == "string":
						use.Labels = append(use.Labels, strings.Trim(toks[j].text, "\"'`"))
					case toks[j].text != ",":
						return q, fmt.Errorf("%s (...): unexpected %q", t.text, toks[j].text)
					}
				}
				if j == len(toks) {
					return q, fmt.Errorf("%s ( is not closed", t.text)
				}
				i = j
			}
			switch {
			case t.text != "by" && t.text != "without":
				// on, ignoring, group_*: the binary operation's operands
				top := stack[len(stack)-1]
				top.uses = append(top.uses, use)
			case at > 0 && toks[at-1].kind == "ident" && promQLAggregations[toks[at-1].text]:
				pending = append(pending, use) // "sum by (l) (x)": the argument comes next
			case at > 0 && toks[at-1].text == ")" && lastClosed != nil:
				use.Metrics = lastClosed.metrics // "sum (x) by (l)": the argument just closed
				q.Uses = append(q.Uses, use)
			default:
				return q, fmt.Errorf("%s (...) without an aggregation", t.text)
			}
		case t.kind == "ident" && next(1).text == "(":
			// a function call or an aggregation: its parentheses open a group
		case t.kind == "ident" && promQLAggregations[t.text] && (next(1).text == "by" || next(1).text == "without"):
		case t.kind == "ident" && promQLKeywordSet[t.text]:
		case t.kind == "ident", t.kind == "matchers":
			name := ""
			if t.kind == "ident" {
				name = t.text
			}
			block := ""
			if t.kind == "matchers" {
				block = t.text
			} else if next(1).kind == "matchers" {
				block = next(1).text
				i++
			}
			ms, err := promQLParseMatchers(block)
			if err != nil {
				return q, fmt.Errorf("{%s}: %v", block, err)
			}
			for _, m := range ms {
				if m.Label == "__name__" && m.Op == "=" {
					name = m.Value
				}
			}
			if name == "" {
				return q, fmt.Errorf("a selector {%s} without a metric name", block)
			}
			for _, m := range ms {
				if m.Label != "__name__" {
					m.Metric = name
					q.Matchers = append(q.Matchers, m)
				}
			}
			q.Metrics = append(q.Metrics, name)
			for _, g := range stack {
				g.metrics = append(g.metrics, name)
			}
		case t.text == "(":
			g := &group{uses: pending}
			pending = nil
			stack = append(stack, g)
		case t.text == ")":
			if len(stack) == 1 {
				return q, fmt.Errorf("unbalanced )")
			}
			g := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			closeGroup(g)
			lastClosed = g
		}
	}
	if len(stack) != 1 || len(pending) > 0 {
		return q, fmt.Errorf("unbalanced ( or a clause without its argument")
	}
	closeGroup(stack[0])
	return q, nil
}

// promQLParseMatchers reads a selector's matcher block.
func promQLParseMatchers(block string) ([]promQLMatcher, error) {
	var out []promQLMatcher
	for rest := block; strings.TrimSpace(rest) != ""; {
		m := promQLMatcherRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot read the matcher %q", rest)
		}
		v := m[3]
		if v[0] == '`' {
			v = v[1 : len(v)-1]
		} else {
			v = strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\'`, `'`).Replace(v[1 : len(v)-1])
		}
		out = append(out, promQLMatcher{Label: m[1], Op: m[2], Value: v})
		rest = rest[len(m[0]):]
	}
	return out, nil
}

func TestParsePromQL(t *testing.T) {
	t.Parallel()
	q, err := parsePromQL(`histogram_quantile(0.95, sum by (le) (rate(a_bucket{phase=~"x|y", kind!="z"}[$__rate_interval]))) / ` +
		`max without (pod) (b offset 5m) + sum(c) by (namespace, rig) * on (ns) group_left (model) d{x=~".+"} > 2`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_bucket", "b", "c", "d"}; !slices.Equal(q.Metrics, want) {
		t.Errorf("metrics %v, want %v", q.Metrics, want)
	}
	wantUses := []promQLUse{
		{Clause: "by", Labels: []string{"le"}, Metrics: []string{"a_bucket"}},
		{Clause: "without", Labels: []string{"pod"}, Metrics: []string{"b"}},
		{Clause: "by", Labels: []string{"namespace", "rig"}, Metrics: []string{"c"}},
		{Clause: "on", Labels: []string{"ns"}, Metrics: []string{"a_bucket", "b", "c", "d"}},
		{Clause: "group_left", Labels: []string{"model"}, Metrics: []string{"a_bucket", "b", "c", "d"}, Any: true},
	}
	if !reflect.DeepEqual(q.Uses, wantUses) {
		t.Errorf("uses\n%+v, want\n%+v", q.Uses, wantUses)
	}
	wantMatchers := []promQLMatcher{{"a_bucket", "phase", "=~", "x|y"}, {"a_bucket", "kind", "!=", "z"}, {"d", "x", "=~", ".+"}}
	if !reflect.DeepEqual(q.Matchers, wantMatchers) {
		t.Errorf("matchers %+v, want %+v", q.Matchers, wantMatchers)
	}
	if v := q.Matchers[0].Values(); !slices.Equal(v, []string{"x", "y"}) {
		t.Errorf("values of %v: %v", q.Matchers[0], v)
	}
	if v := q.Matchers[2].Values(); v != nil {
		t.Errorf("a pattern's values: %v, want none", v)
	}
	// The chart's shapes: nested aggregations, a clause before its
	// argument, an alert's and, a selector by __name__.
	q, err = parsePromQL(`sum(sum by (phase) (max by (phase, shard) (x{phase=~"A|B"}))) > 0 and sum(increase({__name__="y_count"}[30m])) == 0`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.Metrics, []string{"x", "y_count"}) || len(q.Uses) != 2 ||
		!slices.Equal(q.Uses[0].Labels, []string{"phase", "shard"}) || !slices.Equal(q.Uses[1].Metrics, []string{"x"}) {
		t.Errorf("%+v", q)
	}
	for _, bad := range []string{`sum(x`, `x{a="b"`, `sum by (a) x)`, `{a="b"}`, `x{a}`} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
