package phone

import (
	"slices"
	"time"
)

// message is one bubble in a thread.
type message struct {
	fromMe bool
	text   string
	at     time.Time
}

// thread is a conversation with one contact, who answers each message after the phone's ReplyAfter.
type thread struct {
	name     string
	messages []message
	draft    string
	replies  []string // what the contact says next, in order
	pending  []message
	unread   int
}

// initialThreads are the conversations on a fresh phone.
func initialThreads() []*thread {
	day := time.Date(2026, 11, 28, 19, 5, 0, 0, time.UTC)
	return []*thread{
		{name: "Ana", messages: []message{{text: "Dinner tomorrow still on?", at: day}},
			replies: []string{"7pm at Luigi's. See you there!", "Sounds good!"}},
		{name: "Bob", messages: []message{{fromMe: true, text: "Thanks for the book", at: day.Add(-3 * time.Hour)}, {text: "Any time", at: day.Add(-2 * time.Hour)}},
			replies: []string{"OK"}},
	}
}

// send posts the draft and schedules the contact's answer.
func (t *thread) send(now time.Time, after time.Duration) {
	if t.draft == "" {
		return
	}
	t.messages = append(t.messages, message{fromMe: true, text: t.draft, at: now})
	t.draft = ""
	reply := "OK"
	if len(t.replies) > 0 {
		reply, t.replies = t.replies[0], t.replies[1:]
	}
	t.pending = append(t.pending, message{text: reply, at: now.Add(after)})
}

// deliver moves due replies into the thread; they count as unread unless the thread is on screen.
// It returns how many arrived while the thread was not on screen: each showed a notification banner.
func (t *thread) deliver(now time.Time, viewing bool) (banners int) {
	for len(t.pending) > 0 && !now.Before(t.pending[0].at) {
		t.messages = append(t.messages, t.pending[0])
		t.pending = t.pending[1:]
		if !viewing {
			t.unread++
			banners++
		}
	}
	return banners
}

// Receive delivers a message from contact now, on that contact's thread (a new thread, at the
// end of the list, for a contact the phone has not talked to). Like a reply it is unread, and
// shows a notification banner, unless the thread is on screen. A new contact answers "OK" to
// whatever is sent.
func (p *Phone) Receive(contact, text string) {
	t := p.thread(contact)
	if t == nil {
		t = &thread{name: contact}
		p.threads = append(p.threads, t)
	}
	t.messages = append(t.messages, message{text: text, at: p.now})
	if !p.viewingThread(contact) {
		t.unread++
		p.banners++
	}
}

// Banners counts the notification banners the phone has shown since it started: messages that
// arrived on a thread that was not on screen.
func (p *Phone) Banners() int { return p.banners }

func (p *Phone) thread(name string) *thread {
	i := slices.IndexFunc(p.threads, func(t *thread) bool { return t.name == name })
	if i < 0 {
		return nil
	}
	return p.threads[i]
}

func (p *Phone) viewingThread(name string) bool {
	pg, arg := p.top()
	return !p.locked && !p.switcher && p.fg == "Messages" && pg == "messages.thread" && arg == name
}

func messagesRoot(p *Phone, _ string) page {
	els := titleBar("Messages", "")
	for i, t := range p.threads {
		y := contentTop + 0.02 + float64(i)*rowHeight*1.6
		name := t.name
		open := func(p *Phone) {
			p.push("messages.thread:" + name)
			p.thread(name).unread = 0
		}
		last := t.messages[len(t.messages)-1]
		els = append(els, rowTarget(y, open), textEl(t.name, marginX+0.05, y, 2).onTap(open))
		els = append(els, rightAligned(last.at.Format("15:04"), 0.84, y, 1).color("grey"))
		els = append(els, textEl(clip(last.text, 26), marginX+0.05, y+0.035, 1).color("grey").onTap(open))
		if t.unread > 0 {
			els = append(els, icon(Box{0.015, y + 0.008, 0.045, y + 0.022}, "blue"))
		}
	}
	return page{elements: els}
}

func messagesThread(p *Phone, name string) page {
	t := p.thread(name)
	els := titleBar(name, "Messages")
	if t == nil {
		return page{elements: els}
	}
	y := contentTop + 0.02
	for _, m := range t.messages {
		text := clip(m.text, bubbleChars)
		if m.fromMe {
			els = append(els, rightAligned(text, 0.94, y, 2).filled("blue"))
		} else {
			els = append(els, textEl(text, marginX, y, 2).filled("grey"))
		}
		y += rowHeight
	}
	field := textField(t.draft, "iMessage", Box{marginX, 0.91, 0.78, 0.95}, func(p *Phone, text string) { t.draft = text })
	send := textEl("Send", 0.80, 0.917, 2).filled("blue").pinned().onTap(func(p *Phone) { t.send(p.now, p.cfg.ReplyAfter) })
	return page{elements: append(els, field, send), scrollable: true}
}

// bubbleChars is as much of a message as one bubble line shows.
const bubbleChars = 30

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
