package ipoib

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log levels (journald shows them as priorities, ipoibd/systemd.go):
//
//   - ERROR: the interface cannot go on as asked (the TUN unreadable).
//   - WARN: what an operator must act on: resources exhausted, a device
//     or netlink call failing, configuration the daemon cannot follow, the
//     connection service failing.
//   - INFO: state changes: the link and port, connections up, down,
//     refused or failed (peer: the link address, peer_ip: the addresses
//     the neighbor table maps to it), routine drops in the drop report.
//   - DEBUG: single routine events.
//
// What the peers and the fabric do (a REJ, a neighbor that does not
// answer, a packet for nobody, forged input) is routine: counted always,
// logged below WARN.
//
// The interface's log is rate-limited per message: whatever the fabric
// sends, at most logBurst lines with the same message reach the log in a
// logWindow; the rest are counted and reported in one line when the window
// ends. Messages are constants in the code, so the table stays small.
const (
	logBurst  = 5
	logWindow = 10 * time.Second
)

type logLimiter struct {
	next   slog.Handler
	burst  int
	window time.Duration

	mu   sync.Mutex
	msgs map[string]*logCount
}

type logCount struct {
	start   time.Time
	lines   int
	held    int          // lines held back in this window
	handler slog.Handler // the last held line's (its attributes, e.g. "if")
	level   slog.Level
}

func newLogLimiter(next slog.Handler, burst int, window time.Duration) *logLimiter {
	return &logLimiter{next: next, burst: burst, window: window, msgs: map[string]*logCount{}}
}

// handler returns the limiter as a slog.Handler.
func (l *logLimiter) handler() slog.Handler { return limitHandler{l: l, h: l.next} }

// allow reports whether a line with msg may go out at t; h is the handler
// it would go to, where the report of held-back lines goes too.
func (l *logLimiter) allow(msg string, level slog.Level, t time.Time, h slog.Handler) bool {
	l.mu.Lock()
	c := l.msgs[msg]
	if c == nil {
		c = &logCount{start: t}
		l.msgs[msg] = c
	}
	var report logCount
	if t.Sub(c.start) >= l.window {
		report = *c
		*c = logCount{start: t}
	}
	c.lines++
	ok := c.lines <= l.burst
	if !ok {
		c.held++
		c.handler, c.level = h, level
	}
	l.mu.Unlock()
	l.report(msg, &report)
	return ok
}

// flush reports the lines held back in windows that have ended (the
// control goroutine calls it on its tick, so a burst that stops is still
// told).
func (l *logLimiter) flush(now time.Time) {
	var due []logCount
	var names []string
	l.mu.Lock()
	for msg, c := range l.msgs {
		if now.Sub(c.start) >= l.window {
			if c.held > 0 {
				due, names = append(due, *c), append(names, msg)
			}
			delete(l.msgs, msg)
		}
	}
	l.mu.Unlock()
	for k := range due {
		l.report(names[k], &due[k])
	}
}

func (l *logLimiter) report(msg string, c *logCount) {
	if c.held == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), c.level, "log lines held back", 0)
	r.AddAttrs(slog.String("message", msg), slog.Int("count", c.held), slog.Duration("in", l.window))
	_ = c.handler.Handle(context.Background(), r)
}

// limitHandler is one logger's view of the limiter (with its attributes).
type limitHandler struct {
	l *logLimiter
	h slog.Handler
}

func (h limitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.h.Enabled(ctx, level)
}

func (h limitHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.l.allow(r.Message, r.Level, r.Time, h.h) {
		return nil
	}
	return h.h.Handle(ctx, r)
}

func (h limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return limitHandler{l: h.l, h: h.h.WithAttrs(as)}
}

func (h limitHandler) WithGroup(name string) slog.Handler {
	return limitHandler{l: h.l, h: h.h.WithGroup(name)}
}
