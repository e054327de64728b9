package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What the daemon does for systemd: logs the journal reads well, and the
// sd_notify protocol (readiness, watchdog, stopping) without libsystemd.

// logHandler is a text handler; under systemd (JOURNAL_STREAM set: stderr
// goes to the journal) each line carries no timestamp, since the journal
// stamps it itself. When w is that very stream (JOURNAL_STREAM names its
// device and inode) and journald's native socket answers, each record
// goes there as one entry: MESSAGE (the text line), PRIORITY and every
// attribute as a field of its own (IPOIBD_IF=ib0), which journalctl can
// match on. Otherwise, or if a send fails, the line goes to w starting
// with its sd-daemon priority ("<4>").
func logHandler(w io.Writer, level slog.Level) slog.Handler {
	stream := os.Getenv("JOURNAL_STREAM")
	if stream == "" {
		return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	}
	h := &journalHandler{mu: new(sync.Mutex), w: w, buf: new(bytes.Buffer), entry: new(bytes.Buffer),
		ident: filepath.Base(os.Args[0])}
	if f, ok := w.(*os.File); ok && isStream(f, stream) {
		h.native = dialJournal(journalSocket)
	}
	h.text = slog.NewTextHandler(h.buf, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return h
}

type journalHandler struct {
	mu     *sync.Mutex   // shared by the handlers WithAttrs makes: one buf
	w      io.Writer     // stderr
	native *net.UnixConn // journald's native socket, or nil
	ident  string        // SYSLOG_IDENTIFIER of native entries
	buf    *bytes.Buffer // where text writes one record
	entry  *bytes.Buffer // where a native entry is built
	text   slog.Handler
	fields []byte // WithAttrs' attributes, encoded as entry fields
	group  string // WithGroup's names, as a field name prefix
}

// journalSocket is where journald takes native entries.
var journalSocket = "/run/systemd/journal/socket"

// isStream tells whether f is the journal stream JOURNAL_STREAM
// ("DEV:INODE") names: only then does the process log to the journal (a
// child that inherited the variable but not the stream does not).
func isStream(f *os.File, stream string) bool {
	d, i, ok := strings.Cut(stream, ":")
	dev, err1 := strconv.ParseUint(d, 10, 64)
	ino, err2 := strconv.ParseUint(i, 10, 64)
	fi, err := f.Stat()
	if !ok || err1 != nil || err2 != nil || err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && st.Ino == ino
}

func dialJournal(path string) *net.UnixConn {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil
	}
	return c
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.text.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	fmt.Fprintf(h.buf, "<%d>", priority(r.Level))
	n := h.buf.Len()
	if err := h.text.Handle(ctx, r); err != nil {
		return err
	}
	if h.native != nil {
		e := h.entry
		e.Reset()
		e.Write(appendField(nil, "MESSAGE", string(bytes.TrimSuffix(h.buf.Bytes()[n:], []byte("\n")))))
		e.Write(appendField(nil, "PRIORITY", strconv.Itoa(priority(r.Level))))
		e.Write(appendField(nil, "SYSLOG_IDENTIFIER", h.ident))
		e.Write(h.fields)
		var fs []byte
		r.Attrs(func(a slog.Attr) bool {
			fs = appendAttr(fs, h.group, a)
			return true
		})
		e.Write(fs)
		if _, err := h.native.Write(e.Bytes()); err == nil {
			return nil
		}
		// journald gone, or an entry too big for a datagram: the stream
		// still takes the line.
	}
	_, err := h.w.Write(h.buf.Bytes()) // one write: one journal entry
	return err
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.text = h.text.WithAttrs(as)
	c.fields = slices.Clip(h.fields)
	for _, a := range as {
		c.fields = appendAttr(c.fields, h.group, a)
	}
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.text = h.text.WithGroup(name)
	if name != "" {
		c.group = h.group + fieldName(name) + "_"
	}
	return &c
}

// appendAttr encodes a as the field IPOIBD_<GROUPS><KEY>, a group's
// members each as one.
func appendAttr(dst []byte, group string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	switch {
	case a.Equal(slog.Attr{}):
		return dst
	case a.Value.Kind() == slog.KindGroup:
		if a.Key != "" {
			group += fieldName(a.Key) + "_"
		}
		for _, g := range a.Value.Group() {
			dst = appendAttr(dst, group, g)
		}
		return dst
	}
	name := "IPOIBD_" + group + fieldName(a.Key)
	return appendField(dst, name[:min(len(name), 64)], a.Value.String()) // journald's longest
}

// fieldName makes part of a journal field name of an attribute key: upper
// case letters, digits and underscores.
func fieldName(k string) string {
	b := []byte(strings.ToUpper(k))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// appendField encodes one field of a native entry: NAME=value and a
// newline, or, for a value with a newline in it, NAME, a newline, its
// length as 64-bit little endian, the value and a newline.
func appendField(dst []byte, name, value string) []byte {
	if !strings.Contains(value, "\n") {
		return append(append(append(append(dst, name...), '='), value...), '\n')
	}
	dst = append(append(dst, name...), '\n')
	for n, i := uint64(len(value)), 0; i < 8; i++ {
		dst = append(dst, byte(n>>(8*i)))
	}
	return append(append(dst, value...), '\n')
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
