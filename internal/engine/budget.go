package engine

import (
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
)

// The session budgets (docs/engine.md, "Reading the loop"): maxErrors (tool
// errors in a row) and the input token budgets of the attempt and of the run.

// countToolResult counts one non-note call's result toward maxErrors: an
// error of any kind (the rig's error result, a call the policy blocked, a
// call the model got wrong) adds one, a clean result starts the count again.
func (s *Session) countToolResult(name string, isError bool, text string) {
	s.lastTool = name
	if !isError {
		s.toolErrors, s.lastError = 0, ""
		return
	}
	s.toolErrors++
	s.lastError = clipText(name+": "+text, 200)
}

// tooManyErrors ends the session once maxErrors tool errors came in a row.
func (s *Session) tooManyErrors() *Ending {
	if s.toolErrors < s.cfg.MaxErrors {
		return nil
	}
	s.emit(events.Error(s.state.Turn, string(contract.ReasonMaxErrors), fmt.Sprintf("%d tool errors in a row", s.toolErrors), 0))
	return stuck(contract.ReasonMaxErrors, fmt.Sprintf("stopped: %d tool errors in a row (the last: %s)", s.toolErrors, s.lastError))
}

// inputBudget is what is left of the tighter of the two input token
// budgets, and which one it is; ok is false when neither is set.
func (s *Session) inputBudget() (left int64, which string, ok bool) {
	if m := s.cfg.MaxInputTokens; m > 0 {
		left, which, ok = m-s.state.Usage.PromptTokens, fmt.Sprintf("the attempt's input token budget (%d)", m), true
	}
	if r := s.cfg.RunInputTokensLeft; r > 0 {
		if l := r - (s.state.Usage.PromptTokens - s.inputAtStart); !ok || l < left {
			left, which, ok = l, fmt.Sprintf("the run's input token budget (%d left when this attempt started)", r), true
		}
	}
	return left, which, ok
}

// overBudget ends the session when the next request, of about next input
// tokens, would not fit in what is left of the input token budgets. Not
// retryable: a fresh attempt would spend as much.
func (s *Session) overBudget(next int) *Ending {
	left, which, ok := s.inputBudget()
	if !ok || int64(next) <= left {
		return nil
	}
	text := fmt.Sprintf("%s is spent: %d input tokens used, and the next request needs about %d", which, s.state.Usage.PromptTokens, next)
	s.emit(events.Error(s.state.Turn, string(contract.ReasonBudgetExhausted), text, 0))
	return &Ending{Sentinel: contract.Stuck, Reason: contract.ReasonBudgetExhausted, Retryable: false, Recap: "stopped: " + text}
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
