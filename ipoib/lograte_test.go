package ipoib

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogLimiter: per message, burst lines a window pass; the rest are
// held back and told in one line when the window ends, whether another
// line comes (allow) or not (flush).
func TestLogLimiter(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name  string
		lines []struct {
			msg string
			at  time.Duration
		}
		flushAt time.Duration // 0: no flush
		want    []string      // messages written, in order
	}{
		{"under the burst", lines("a@0", "a@1", "b@2"), 0, []string{"a", "a", "b"}},
		{"over the burst", lines("a@0", "a@1", "a@2", "a@3", "b@4"), 0, []string{"a", "a", "b"}},
		{"told at the next window", lines("a@0", "a@1", "a@2", "a@3", "a@10"), 0, []string{"a", "a", "held back a 2", "a"}},
		{"told by flush", lines("a@0", "a@1", "a@2"), 11 * time.Second, []string{"a", "a", "held back a 1"}},
		{"flush with nothing held", lines("a@0"), 11 * time.Second, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			l := newLogLimiter(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: dropTime}), 2, 10*time.Second)
			log := slog.New(l.handler()).With("if", "ib0")
			for _, x := range tc.lines {
				r := slog.NewRecord(t0.Add(x.at), slog.LevelInfo, x.msg, 0)
				_ = log.Handler().Handle(context.Background(), r)
			}
			if tc.flushAt != 0 {
				l.flush(t0.Add(tc.flushAt))
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if !strings.Contains(line, "if=ib0") {
					t.Errorf("line without the logger's attributes: %s", line)
				}
				if m, ok := strings.CutPrefix(line, `level=INFO msg="log lines held back" if=ib0 message=`); ok {
					f := strings.Fields(m)
					got = append(got, "held back "+f[0]+" "+strings.TrimPrefix(f[1], "count="))
					continue
				}
				got = append(got, strings.TrimSuffix(strings.TrimPrefix(line, "level=INFO msg="), " if=ib0"))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("wrote %q, want %q\n%s", got, tc.want, out.String())
			}
		})
	}
}

// lines reads "msg@seconds" specs.
func lines(specs ...string) []struct {
	msg string
	at  time.Duration
} {
	var out []struct {
		msg string
		at  time.Duration
	}
	for _, s := range specs {
		msg, at, _ := strings.Cut(s, "@")
		d, _ := time.ParseDuration(at + "s")
		out = append(out, struct {
			msg string
			at  time.Duration
		}{msg, d})
	}
	return out
}

func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}
