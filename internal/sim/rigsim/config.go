package rigsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
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
	// AssistiveTouch is the AssistiveTouch button's box [left, top, right,
	// bottom] in screen fractions (nil: DefaultAssistiveTouch): where it is
	// drawn and listed, the zone gestures are refused in, and the centre
	// /api/status reports.
	AssistiveTouch *[4]float64 `json:"assistiveTouch,omitempty"`
	// Rigs overrides settings for single rigs of a farm, by name (rig-0, rig-1 …).
	Rigs map[string]RigConfig `json:"rigs,omitempty"`
}

// RigConfig is what one rig of a farm may set differently from the others.
type RigConfig struct {
	// AssistiveTouch is this rig's button box, as Config.AssistiveTouch.
	AssistiveTouch *[4]float64 `json:"assistiveTouch,omitempty"`
}

// DefaultAssistiveTouch is where a rig's AssistiveTouch button sits unless
// its configuration says otherwise: at the right edge, a little below the
// middle, square on the rendered frame.
var DefaultAssistiveTouch = [4]float64{0.88, 0.62, 0.98, 0.666}

// forRig is the configuration of the farm's rig called name.
func (c Config) forRig(name string) Config {
	if o, ok := c.Rigs[name]; ok && o.AssistiveTouch != nil {
		c.AssistiveTouch = o.AssistiveTouch
	}
	return c
}

// assistiveTouch is the rig's button box.
func (c Config) assistiveTouch() phone.Box {
	b := DefaultAssistiveTouch
	if c.AssistiveTouch != nil {
		b = *c.AssistiveTouch
	}
	return phone.Box{L: b[0], T: b[1], R: b[2], B: b[3]}
}

// rigName matches the names NewFarm gives its rigs.
var rigName = regexp.MustCompile(`^rig-(0|[1-9][0-9]*)$`)

// CheckFarm checks that every rig the configuration overrides is one of a
// farm of n rigs.
func (c Config) CheckFarm(n int) error {
	for name := range c.Rigs {
		m := rigName.FindStringSubmatch(name)
		if m == nil {
			return fmt.Errorf("rig config: rigs.%s: no such rig: a farm's rigs are named rig-0, rig-1 …", name)
		}
		if i, _ := strconv.Atoi(m[1]); i >= n {
			return fmt.Errorf("rig config: rigs.%s: no such rig: a farm of %d has rig-0 to rig-%d", name, n, n-1)
		}
	}
	return nil
}

// validate checks what ParseConfig cannot leave to the rig.
func (c Config) validate() error {
	if err := c.Faults.Validate(); err != nil {
		return err
	}
	if c.TimeScale < 0 {
		return fmt.Errorf("timeScale=%v: want zero or more", c.TimeScale)
	}
	if c.SessionIdle < 0 {
		return fmt.Errorf("sessionIdle=%v: want a positive duration such as 30s, or 0 for the default", time.Duration(c.SessionIdle))
	}
	if err := checkButton("assistiveTouch", c.AssistiveTouch); err != nil {
		return err
	}
	for name, o := range c.Rigs {
		if !rigName.MatchString(name) {
			return fmt.Errorf("rigs.%s: no such rig: a farm's rigs are named rig-0, rig-1 …", name)
		}
		if err := checkButton("rigs."+name+".assistiveTouch", o.AssistiveTouch); err != nil {
			return err
		}
	}
	return nil
}

// checkButton checks an AssistiveTouch box.
func checkButton(field string, b *[4]float64) error {
	if b == nil {
		return nil
	}
	for _, v := range b {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return fmt.Errorf("%s=%v: want [left, top, right, bottom] in screen fractions 0..1", field, *b)
		}
	}
	if b[0] >= b[2] || b[1] >= b[3] {
		return fmt.Errorf("%s=%v: want left < right and top < bottom", field, *b)
	}
	return nil
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
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("rig config: %w", err)
	}
	return c, nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
