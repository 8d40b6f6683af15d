// Package pricing prices the tokens an attempt used: a model's price in USD
// per million tokens (spec.model.pricing, or the manager's price list), in
// exact decimal arithmetic.
package pricing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// ListKey is the key of the price list in the manager's pricing ConfigMap:
// a YAML map from model name to a price (model names may hold "/", which a
// ConfigMap key may not).
const ListKey = "prices.yaml"

// Decimals is how many decimal places a cost keeps.
const Decimals = 6

var million = big.NewRat(1_000_000, 1)

// decimal is a non-negative decimal number; the exponent form is what a
// YAML number such as 0.000001 may turn into on its way through JSON.
var decimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

// Price is a model's price in USD per million tokens.
type Price struct {
	Input, CachedInput, CacheWrite, Output *big.Rat
}

// FromSpec reads a run's spec.model.pricing. Cached input and cache writes
// default to the input price.
func FromSpec(p *farmv1.ModelPricing) (Price, error) {
	return parse(p.Input, p.CachedInput, p.CacheWrite, p.Output)
}

func parse(input, cachedInput, cacheWrite, output string) (Price, error) {
	var pr Price
	var errs []error
	read := func(field, v string, dst **big.Rat, required bool) {
		if v == "" {
			if required {
				errs = append(errs, fmt.Errorf("%s is missing", field))
			}
			return
		}
		r, ok := new(big.Rat).SetString(v)
		if !decimal.MatchString(v) || !ok {
			errs = append(errs, fmt.Errorf("%s %q is not a non-negative decimal number", field, v))
			return
		}
		*dst = r
	}
	read("input", input, &pr.Input, true)
	read("cachedInput", cachedInput, &pr.CachedInput, false)
	read("cacheWrite", cacheWrite, &pr.CacheWrite, false)
	read("output", output, &pr.Output, true)
	if err := errors.Join(errs...); err != nil {
		return Price{}, err
	}
	if pr.CachedInput == nil {
		pr.CachedInput = pr.Input
	}
	if pr.CacheWrite == nil {
		pr.CacheWrite = pr.Input
	}
	return pr, nil
}

// Cost is what the usage costs in USD: uncached input (prompt − cached −
// cache writes), cached input, cache writes and output, each at its price
// per million tokens.
func (p Price) Cost(u farmv1.TokenUsage) *big.Rat {
	cost := new(big.Rat)
	add := func(tokens int64, price *big.Rat) {
		if tokens > 0 {
			cost.Add(cost, new(big.Rat).Mul(new(big.Rat).SetInt64(tokens), price))
		}
	}
	add(Uncached(u), p.Input)
	add(u.CachedTokens, p.CachedInput)
	add(u.CacheWriteTokens, p.CacheWrite)
	add(u.CompletionTokens, p.Output)
	return cost.Quo(cost, million)
}

// Uncached is the input tokens neither read from nor written to the prompt
// cache (never below 0).
func Uncached(u farmv1.TokenUsage) int64 {
	return max(0, u.PromptTokens-u.CachedTokens-u.CacheWriteTokens)
}

// Format writes a cost as a decimal string with at most Decimals places,
// rounded half away from zero, without trailing zeros ("0.0123", "2", "0").
func Format(r *big.Rat) string {
	s := r.FloatString(Decimals)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// Sum adds two formatted costs; an empty one counts as nothing.
func Sum(a, b string) (string, error) {
	total := new(big.Rat)
	for _, v := range []string{a, b} {
		if v == "" {
			continue
		}
		r, ok := new(big.Rat).SetString(v)
		if !ok || !decimal.MatchString(v) {
			return "", fmt.Errorf("cost %q is not a decimal number", v)
		}
		total.Add(total, r)
	}
	return Format(total), nil
}

// List is the manager's price list by model name. A model whose entry is
// malformed is in it with the error, so the runs of the other models are
// still priced.
type List map[string]Entry

// Entry is one model's price, or what is wrong with it.
type Entry struct {
	Price Price
	Err   error
}

// Lookup finds a model's price: ok is false when the list does not name the
// model, err says what is wrong with its entry.
func (l List) Lookup(model string) (p Price, ok bool, err error) {
	e, ok := l[model]
	return e.Price, ok, e.Err
}

// ParseList reads a price list (the ConfigMap's prices.yaml):
//
//	gpt-4.1: {input: "2", cachedInput: "0.5", output: "8"}
//	anthropic/claude-sonnet-4-5: {input: "3", cachedInput: "0.3", cacheWrite: "3.75", output: "15"}
//
// Prices may be strings or YAML numbers. An error is returned only when the
// document as a whole cannot be read.
func ParseList(data []byte) (List, error) {
	var raw map[string]map[string]any
	if err := yaml.Unmarshal(data, &raw, func(d *json.Decoder) *json.Decoder { d.UseNumber(); return d }); err != nil {
		return nil, fmt.Errorf("%s: want a map of model name to {input, cachedInput, cacheWrite, output}: %w", ListKey, err)
	}
	l := List{}
	for model, fields := range raw {
		v := map[string]string{}
		var errs []error
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch k {
			case "input", "cachedInput", "cacheWrite", "output":
			default:
				errs = append(errs, fmt.Errorf("unknown field %q", k))
				continue
			}
			switch x := fields[k].(type) {
			case json.Number:
				v[k] = x.String()
			case string:
				v[k] = x
			default:
				errs = append(errs, fmt.Errorf("%s is %v, not a number", k, fields[k]))
			}
		}
		p, err := parse(v["input"], v["cachedInput"], v["cacheWrite"], v["output"])
		if err = errors.Join(append(errs, err)...); err != nil {
			l[model] = Entry{Err: fmt.Errorf("%s: model %q: %w", ListKey, model, err)}
			continue
		}
		l[model] = Entry{Price: p}
	}
	return l, nil
}
