package rigsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// Config is how a rig starts: its phone, its clock and its faults. It loads from YAML or JSON.
type Config struct {
	// Seed makes glare, missed taps, hiccups and busy refusals repeatable.
	Seed uint64 `json:"seed"`
	// TimeScale is real seconds slept per simulated second of tool time (0: no sleeping).
	TimeScale float64 `json:"timeScale"`
	// WallClock also advances the phone's clock with real time (a demo); tests leave it off.
	WallClock bool `json:"wallClock"`
	// UnlockCode is the passcode unlock_phone types (a PhysiClaw rig's is 111111).
	UnlockCode string      `json:"unlockCode"`
	Phone      PhoneConfig `json:"phone"`
	Faults     Faults      `json:"faults"`
	// SessionIdle is how long a session may go without a tool call before
	// the session ledger closes it (0: DefaultSessionIdle).
	SessionIdle Duration `json:"sessionIdle"`
}

// PhoneConfig is the phone's starting state.
type PhoneConfig struct {
	Passcode   string   `json:"passcode"`
	Locked     bool     `json:"locked"`
	AutoLock   Duration `json:"autoLock"`
	ReplyAfter Duration `json:"replyAfter"`
	WiFi       *bool    `json:"wifi"`
}

// DefaultUnlockCode is what a PhysiClaw rig's unlock_phone types.
const DefaultUnlockCode = phone.DefaultPasscode

func (c PhoneConfig) phone() phone.Config {
	return phone.Config{Passcode: c.Passcode, Locked: c.Locked, AutoLock: time.Duration(c.AutoLock),
		ReplyAfter: time.Duration(c.ReplyAfter), WiFi: c.WiFi}
}

// LoadConfig reads a rig configuration file (YAML or JSON).
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read rig config: %w", err)
	}
	return ParseConfig(b)
}

// ParseConfig parses a rig configuration (YAML or JSON), refusing unknown fields.
func ParseConfig(b []byte) (Config, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return Config{}, fmt.Errorf("rig config is not YAML or JSON: %w", err)
	}
	var c Config
	if err := strictJSON(j, &c); err != nil {
		return Config{}, fmt.Errorf("rig config: %w", err)
	}
	if err := c.Faults.Validate(); err != nil {
		return Config{}, fmt.Errorf("rig config: %w", err)
	}
	if c.TimeScale < 0 {
		return Config{}, fmt.Errorf("rig config: timeScale=%v: want zero or more", c.TimeScale)
	}
	if c.SessionIdle < 0 {
		return Config{}, fmt.Errorf("rig config: sessionIdle=%v: want a positive duration such as 30s, or 0 for the default", time.Duration(c.SessionIdle))
	}
	return c, nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
