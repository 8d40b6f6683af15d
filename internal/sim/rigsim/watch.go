package rigsim

import (
	"net/http"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The camera watchdog. A PhysiClaw rig watches its phone's screen and answers
// GET /api/phone/watch with {"wake": bool, "reason": "..."}: wake true once
// per change it noticed (a message arrived), so whoever polls it can start a
// run that looks at the phone. rigsim raises a wake when a message arrives on
// a thread that is not on screen (a contact's reply, or POST /api/sim/message),
// or when told to (POST /api/sim/wake), and keeps it raised until the route
// reads it.

// Reasons of a wake, in PhysiClaw's words.
const (
	// WakeBanner is the reason of a wake raised by a message that arrived on
	// a thread not on screen.
	WakeBanner = "notification banner appeared at top of screen"
	// WakeIdle is PhysiClaw's idle fallback, a wake with nothing new on the
	// phone; rigsim raises it only when POST /api/sim/wake asks without a
	// reason, never on its own.
	WakeIdle = contract.WakeReasonIdle
)

// Watch is the body of GET /api/phone/watch.
type Watch struct {
	Wake   bool   `json:"wake"`
	Reason string `json:"reason"`
}

// WakeState is the wake raised and not yet read, as GET /api/sim/state
// reports it under "wake".
type WakeState struct {
	Raised bool   `json:"raised"`
	Reason string `json:"reason"`
}

// noticeBanners raises a wake if the phone showed a notification banner since
// the watchdog last looked. The phone counts its banners; the rig remembers
// how many it has seen, so a banner raises one wake however late it is looked
// at, and a wake raised after it (RaiseWake) still comes later. Holds mu.
func (r *Rig) noticeBanners() {
	if n := r.phone.Banners(); n > r.bannersSeen {
		r.bannersSeen = n
		r.wake = WakeState{Raised: true, Reason: WakeBanner}
	}
}

// Watch is GET /api/phone/watch: the raised wake, which reading consumes.
// A rig that is not set up (status ready false) answers no wake, as
// PhysiClaw's does before its set-up; so does a rig an MCP session holds
// (PhysiClaw's watch takes the hardware lock, so nobody polls it during a
// task). Either way the raised wake stays for a later read.
func (r *Rig) Watch() Watch {
	if !r.Faults().ready() || r.ledger.active() {
		return Watch{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	r.noticeBanners()
	w := Watch{Wake: r.wake.Raised, Reason: r.wake.Reason}
	r.wake = WakeState{}
	return w
}

// RaiseWake raises a wake with reason (WakeIdle if empty), replacing any
// raised before: the latest change is the one a read reports.
func (r *Rig) RaiseWake(reason string) WakeState {
	if reason == "" {
		reason = WakeIdle
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	r.noticeBanners()
	r.wake = WakeState{Raised: true, Reason: reason}
	return r.wake
}

// RaisedWake is the wake raised and not yet read, without consuming it.
func (r *Rig) RaisedWake() WakeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	r.noticeBanners()
	return r.wake
}

// ReceiveMessage makes a message from contact arrive on the phone now
// (phone.Receive): unread, and a wake, unless its thread is on screen.
func (r *Rig) ReceiveMessage(contact, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	r.phone.Receive(contact, text)
	r.noticeBanners()
}

// forgetWake drops the raised wake and the banners shown so far, as a
// restarted server's watchdog starts from the screen as it is. Holds mu.
func (r *Rig) forgetWake() {
	r.wake = WakeState{}
	r.bannersSeen = r.phone.Banners()
}

// messageUsage is what POST /api/sim/message wants.
const messageUsage = `want {"from": "Ana", "text": "Are you free on Saturday?"}`

// postMessage is POST /api/sim/message: a message arrives now; it answers
// the phone's state, as /api/sim/advance does.
func (r *Rig) postMessage(w http.ResponseWriter, req *http.Request) {
	var body struct {
		From string `json:"from"`
		Text string `json:"text"`
	}
	if err := decodeBody(req.Body, &body); err != nil {
		http.Error(w, "message: "+err.Error()+"; "+messageUsage, http.StatusBadRequest)
		return
	}
	body.From = strings.TrimSpace(body.From)
	var missing []string
	if body.From == "" {
		missing = append(missing, `"from" (the contact)`)
	}
	if strings.TrimSpace(body.Text) == "" {
		missing = append(missing, `"text" (the message)`)
	}
	if len(missing) > 0 {
		http.Error(w, "message: missing "+strings.Join(missing, " and ")+"; "+messageUsage, http.StatusBadRequest)
		return
	}
	r.ReceiveMessage(body.From, body.Text)
	writeJSON(w, r.State())
}

// postWake is POST /api/sim/wake: raise a wake, with the body's reason or
// WakeIdle; it answers the raised wake.
func (r *Rig) postWake(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeBody(req.Body, &body); err != nil {
		http.Error(w, `wake: `+err.Error()+`; want {"reason": "..."}, or {} or no body for an idle check-in`, http.StatusBadRequest)
		return
	}
	writeJSON(w, r.RaiseWake(strings.TrimSpace(body.Reason)))
}
