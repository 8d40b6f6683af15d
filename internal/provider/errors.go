package provider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrorClass is what kind of failure a provider error is; the engine's retry
// policy acts on the class (docs/engine.md, "Reading the loop", ask).
type ErrorClass string

// The error classes.
const (
	ClassRateLimit       ErrorClass = "rate_limit"       // backoff with jitter, honour Retry-After
	ClassTimeout         ErrorClass = "timeout"          // immediate retry (also: idle stream, dropped connection)
	ClassOverloaded      ErrorClass = "overloaded"       // immediate retry (529, 5xx)
	ClassContextOverflow ErrorClass = "context_overflow" // hand to compaction
	ClassAuth            ErrorClass = "auth"             // fatal
	ClassBilling         ErrorClass = "billing"          // fatal
	ClassModelNotFound   ErrorClass = "model_not_found"  // fatal
	ClassInvalidRequest  ErrorClass = "invalid_request"  // fatal: retrying the same request cannot help
	ClassCanceled        ErrorClass = "canceled"         // the caller's context ended
)

// Fatal reports whether no retry can help.
func (c ErrorClass) Fatal() bool {
	switch c {
	case ClassAuth, ClassBilling, ClassModelNotFound, ClassInvalidRequest:
		return true
	}
	return false
}

// Error is a classified provider error.
type Error struct {
	Class      ErrorClass
	Status     int           // HTTP status, 0 when none
	RetryAfter time.Duration // from a Retry-After header, 0 when none
	Message    string
	Err        error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrIdleTimeout is the cause of a reply aborted by the idle watchdog.
var ErrIdleTimeout = errors.New("model stream idle: no data within the idle timeout")

// AsError returns err as a *Error, classifying it when it is not one yet.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Class: ClassifyTransport(err), Message: err.Error(), Err: err}
}

// ClassifyTransport classifies an error that carries no HTTP status.
func ClassifyTransport(err error) ErrorClass {
	switch {
	case errors.Is(err, ErrIdleTimeout):
		return ClassTimeout
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	// A refused, reset or dropped connection: retry at once, like a timeout.
	return ClassTimeout
}

// overflowPhrases are how vendors say the prompt is too long.
var overflowPhrases = []string{
	"context length", "context_length", "maximum context", "context window",
	"prompt is too long", "input is too long", "too many tokens", "reduce the length",
	"maximum prompt length", "exceeds the limit of", "request too large", "string too long",
	"input token count",
}

// Classify maps an HTTP status and the vendor's error type and message to a class.
func Classify(status int, errType, message string) ErrorClass {
	m := strings.ToLower(errType + " " + message)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(m, w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("insufficient_quota", "billing_hard_limit", "credit balance", "payment required", "exceeded your current quota", "insufficient balance"):
		return ClassBilling
	case status == http.StatusTooManyRequests || has("rate_limit", "rate limit"):
		return ClassRateLimit
	case status == http.StatusUnauthorized || status == http.StatusForbidden ||
		has("authentication_error", "invalid_api_key", "permission_error", "incorrect api key"):
		return ClassAuth
	case status == http.StatusPaymentRequired:
		return ClassBilling
	case status == http.StatusRequestEntityTooLarge || has(overflowPhrases...):
		return ClassContextOverflow
	case status == http.StatusNotFound || has("model_not_found") || (has("model") && has("not found", "does not exist", "not exist")):
		return ClassModelNotFound
	case status == 529 || has("overloaded"):
		return ClassOverloaded
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return ClassTimeout
	case status >= 500:
		return ClassOverloaded
	case status >= 400:
		return ClassInvalidRequest
	}
	return ClassTimeout
}

// ParseRetryAfter reads a Retry-After header (seconds or an HTTP date), or the
// retry-after-ms header some vendors send. It returns 0 when there is none.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 {
			return time.Duration(v * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
