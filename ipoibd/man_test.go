package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/spf13/pflag"
)

// TestManPageSections: the man page has every section an operator looks
// for, explains every exit status and every counter of the table, and no
// flag's placeholder is a phrase (pflag takes a flag's first `quoted`
// words for it: --child once read "ipoibd child add").
func TestManPageSections(t *testing.T) {
	var b bytes.Buffer
	manPage(&b)
	man := b.String()
	var want []string
	for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "RUN FLAGS", "QUERY FLAGS", "SIGNALS", "EXIT STATUS", "COUNTERS", "EXAMPLES", "FILES", "SEE ALSO"} {
		want = append(want, "\n.SH "+s+"\n")
	}
	for _, e := range exitStatuses {
		want = append(want, fmt.Sprintf(".TP\n.B %d\n%s\n", e.code, roff(e.what)))
	}
	for _, e := range counterdoc.All() {
		head := `\fB` + roff(e.Name) + `\fR`
		if e.Trouble {
			head += " (TROUBLE)"
		}
		want = append(want, ".TP\n"+head+"\n"+roff(e.Meaning))
	}
	want = append(want, `.B \-\-child \fIPKEY[=ADDRESS/LENGTH,...]\fR`, `.B \-\-addr \fIADDRESS/LENGTH\fR`,
		"ipoibd child add 8002", `.SS The connection manager (cm_)`, `\fBcm_rej_sent_*\fR`)
	for _, w := range want {
		if !strings.Contains(man, w) {
			t.Errorf("man page lacks %q", w)
		}
	}
	for _, fs := range []*pflag.FlagSet{runFlags(&options{}), func() *pflag.FlagSet { f, _, _ := queryFlags("show"); return f }()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.Contains(name, " ") {
				t.Errorf("--%s's placeholder is %q, a phrase: quote only the value's form in its usage", f.Name, name)
			}
		})
	}
}

// TestManExamplesParse: every ipoibd line of the man page's EXAMPLES is
// a command line ipoibd takes (a daemon's flags are checked as run checks
// them), so the examples cannot rot.
func TestManExamplesParse(t *testing.T) {
	n := 0
	for _, e := range examples {
		for _, line := range e.cmds {
			_, cmd, ok := strings.Cut(line, "# ")
			if !ok {
				t.Errorf("%q: no prompt", line)
				continue
			}
			cmd = strings.TrimSuffix(strings.TrimPrefix(cmd, "ip netns exec h1 "), " &")
			args, ok := strings.CutPrefix(cmd, "ipoibd ")
			if !ok {
				continue
			}
			n++
			fields := strings.Fields(args)
			k := commandAt(fields)
			if k < 0 {
				if _, err := parseSettings(fields); err != nil {
					t.Errorf("%q: %v", line, err)
				}
				continue
			}
			rest := append(fields[k+1:], fields[:k]...)
			var err error
			switch fields[k] {
			case "child":
				c := newIfCommand("child " + rest[0])
				childAddFlags(c, &control.ChildRequest{})
				_, _, err = c.parse(rest[1:], &bytes.Buffer{}, "PKEY")
			default:
				c := newIfCommand(fields[k])
				_, _, err = c.parse(rest, &bytes.Buffer{})
			}
			if err != nil {
				t.Errorf("%q: %v", line, err)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d ipoibd lines in the examples", n)
	}
}
