package phone

import "time"

// State is the phone's ground truth, for tests that check a task really happened.
type State struct {
	Clock      time.Time     `json:"clock"`
	Locked     bool          `json:"locked"`
	Page       string        `json:"page"`
	Foreground string        `json:"foreground"`
	Running    []string      `json:"running"`
	Clipboard  string        `json:"clipboard"`
	Touches    int           `json:"touches"`
	WiFi       bool          `json:"wifi"`
	Timer      TimerState    `json:"timer"`
	Messages   MessagesState `json:"messages"`
	Shop       ShopState     `json:"shop"`
}

// TimerState is the Clock app's timer.
type TimerState struct {
	Running          bool `json:"running"`
	Paused           bool `json:"paused"`
	DurationSeconds  int  `json:"durationSeconds"`
	RemainingSeconds int  `json:"remainingSeconds"`
	Fired            bool `json:"fired"`
}

// MessagesState is every message sent and received since the phone started, plus what is unread.
type MessagesState struct {
	Sent     []MessageRecord `json:"sent"`
	Received []MessageRecord `json:"received"`
	Pending  int             `json:"pending"` // replies not yet arrived
	Unread   int             `json:"unread"`
}

// MessageRecord is one message in the ground truth.
type MessageRecord struct {
	Contact string    `json:"contact"`
	Text    string    `json:"text"`
	At      time.Time `json:"at"`
}

// ShopState is the Shop app's cart and orders.
type ShopState struct {
	Cart   []CartLine `json:"cart"`
	Orders []Order    `json:"orders"`
}

// State reports the ground truth.
func (p *Phone) State() State {
	s := State{Clock: p.now, Locked: p.locked, Page: p.Page(), Foreground: p.fg, Running: append([]string{}, p.recents...),
		Clipboard: p.clipboard, Touches: p.taps, WiFi: p.wifi,
		Timer: TimerState{Running: p.timer.running, Paused: p.timer.paused, DurationSeconds: int(p.timer.duration.Seconds()),
			RemainingSeconds: int(p.timer.remaining(p.now).Seconds()), Fired: p.timer.fired},
		Messages: MessagesState{Sent: []MessageRecord{}, Received: []MessageRecord{}},
		Shop:     ShopState{Cart: append([]CartLine{}, p.shop.cart...), Orders: append([]Order{}, p.shop.orders...)},
	}
	for _, t := range p.threads {
		for _, m := range t.messages {
			if m.at.Before(p.cfg.Start) {
				continue // history the phone came with
			}
			r := MessageRecord{Contact: t.name, Text: m.text, At: m.at}
			if m.fromMe {
				s.Messages.Sent = append(s.Messages.Sent, r)
			} else {
				s.Messages.Received = append(s.Messages.Received, r)
			}
		}
		s.Messages.Pending += len(t.pending)
		s.Messages.Unread += t.unread
	}
	return s
}
