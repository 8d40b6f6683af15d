// Package validate checks a tool call's arguments against the tool's JSON
// schema before dispatch (docs/engine.md, "Reading the loop", dispatch).
package validate

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// Validator holds resolved schemas by tool name.
type Validator struct {
	mu       sync.Mutex
	resolved map[string]*jsonschema.Resolved
	broken   map[string]error
}

// New returns an empty validator.
func New() *Validator {
	return &Validator{resolved: map[string]*jsonschema.Resolved{}, broken: map[string]error{}}
}

// Add resolves a tool's schema. A schema the validator cannot use is
// remembered: calls to that tool are then checked only for being a JSON object.
func (v *Validator) Add(tool string, schema json.RawMessage) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		v.broken[tool] = err
		return fmt.Errorf("schema of %s: %w", tool, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		v.broken[tool] = err
		return fmt.Errorf("schema of %s: %w", tool, err)
	}
	v.resolved[tool] = rs
	return nil
}

// Check parses args (raw JSON text) and validates them. The error says what
// is wrong in words the model can act on.
func (v *Validator) Check(tool, args string) (json.RawMessage, error) {
	if args == "" {
		args = "{}"
	}
	var inst any
	if err := json.Unmarshal([]byte(args), &inst); err != nil {
		return nil, fmt.Errorf("the arguments are not valid JSON (%v); send one JSON object", err)
	}
	if _, ok := inst.(map[string]any); !ok {
		return nil, fmt.Errorf("the arguments must be one JSON object, not %s", kind(inst))
	}
	v.mu.Lock()
	rs := v.resolved[tool]
	v.mu.Unlock()
	if rs != nil {
		if err := rs.Validate(inst); err != nil {
			return nil, fmt.Errorf("the arguments do not match %s's schema: %v", tool, err)
		}
	}
	return json.RawMessage(args), nil
}

func kind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
