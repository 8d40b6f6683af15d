package claw

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// printer writes lines, and on a terminal keeps a progress bar under them:
// each line clears the bar, is written, and the bar is drawn again. Off a
// terminal (a pipe, a file, CI) it writes the lines only. Lines come from
// the log stream's goroutine and the status poll at once, hence the lock.
type printer struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
	bar string // the bar on screen, "" when none
}

const clearLine = "\r\033[K"

// Line writes one line above the bar.
func (p *printer) Line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.bar != "" {
		fmt.Fprint(p.w, clearLine)
	}
	fmt.Fprintln(p.w, s)
	if p.tty && p.bar != "" {
		fmt.Fprint(p.w, p.bar)
	}
}

// Bar draws (or redraws) the bar; a no-op off a terminal.
func (p *printer) Bar(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty || s == p.bar {
		return
	}
	fmt.Fprint(p.w, clearLine+s)
	p.bar = s
}

// ClearBar removes the bar, before the last lines.
func (p *printer) ClearBar() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.bar != "" {
		fmt.Fprint(p.w, clearLine)
	}
	p.bar = ""
}

const barWidth = 24

// progressBar renders turn of limit: `[██████░░░░░░░░░░░░░░░░░░]  12/300`.
func progressBar(turn, limit int32) string {
	if limit <= 0 {
		limit = 1
	}
	n := int(int64(min(max(turn, 0), limit)) * barWidth / int64(limit))
	return "[" + strings.Repeat("█", n) + strings.Repeat("░", barWidth-n) + "]" + fmt.Sprintf("  %d/%d", turn, limit)
}
