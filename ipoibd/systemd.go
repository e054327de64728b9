package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// What the daemon does for systemd: logs the journal reads well, and the
// sd_notify protocol (readiness, watchdog, stopping) without libsystemd.

// logHandler is a text handler; under systemd (JOURNAL_STREAM set: stderr
// goes to the journal) each line starts with its sd-daemon priority
// ("<4>") and carries no timestamp, since the journal stamps it itself.
func logHandler(w io.Writer, level slog.Level) slog.Handler {
	if os.Getenv("JOURNAL_STREAM") == "" {
		return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	}
	h := &journalHandler{mu: new(sync.Mutex), w: w, buf: new(bytes.Buffer)}
	h.text = slog.NewTextHandler(h.buf, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return h
}

type journalHandler struct {
	mu   *sync.Mutex   // shared by the handlers WithAttrs makes: one buf
	w    io.Writer     // stderr
	buf  *bytes.Buffer // where text writes one record
	text slog.Handler
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.text.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	fmt.Fprintf(h.buf, "<%d>", priority(r.Level))
	if err := h.text.Handle(ctx, r); err != nil {
		return err
	}
	_, err := h.w.Write(h.buf.Bytes()) // one write: one journal entry
	return err
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.text = h.text.WithAttrs(as)
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.text = h.text.WithGroup(name)
	return &c
}

// priority maps a level to syslog's: debug 7, info 6, warn 4, error 3.
func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// notifier speaks sd_notify: datagrams to $NOTIFY_SOCKET. Without it
// (not under systemd, or Type=simple) every call does nothing.
type notifier struct {
	log  *slog.Logger
	addr *net.UnixAddr
}

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log}
	path := os.Getenv("NOTIFY_SOCKET")
	switch {
	case path == "":
	case path[0] == '@': // abstract: Go spells the leading NUL as '@'
		n.addr = &net.UnixAddr{Name: path, Net: "unixgram"}
	case path[0] == '/':
		n.addr = &net.UnixAddr{Name: path, Net: "unixgram"}
	default:
		log.Warn("NOTIFY_SOCKET is neither a path nor abstract; not notifying systemd", "NOTIFY_SOCKET", path)
	}
	return n
}

// send delivers one state message ("READY=1", "WATCHDOG=1", ...).
func (n *notifier) send(state string) {
	if n.addr == nil {
		return
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err == nil {
		_, err = c.Write([]byte(state))
		c.Close()
	}
	if err != nil {
		n.log.Warn("sd_notify", "state", state, "err", err)
	}
}

// watchdog pings at half of $WATCHDOG_USEC while alive() returns: alive
// is a round trip through the interface's control goroutine, so a stuck
// daemon stops pinging and systemd restarts it. It returns a stop func.
func (n *notifier) watchdog(alive func()) (stop func()) {
	usec, err := strconv.ParseUint(os.Getenv("WATCHDOG_USEC"), 10, 63)
	pid := os.Getenv("WATCHDOG_PID")
	if n.addr == nil || err != nil || usec == 0 || (pid != "" && pid != strconv.Itoa(os.Getpid())) {
		return func() {}
	}
	every := time.Duration(usec) * time.Microsecond / 2
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				alive()
				n.send("WATCHDOG=1")
			}
		}
	}()
	// Not waiting for the goroutine: a stuck alive() must not hold up
	// shutdown.
	return func() { close(done) }
}
