package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestUsage: a wrong command line is a usage error (exit status 2) that
// names what is wrong, found before any cluster is touched.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frob", "x"}, `unknown command "frob"`},
		{[]string{"up", "x"}, "up: wrong number of arguments"},
		{[]string{"up", "x", "3", "4"}, "up: wrong number of arguments"},
		{[]string{"up", "x", "three"}, `N "three"`},
		{[]string{"up", "x", "0"}, `N "0"`},
		{[]string{"start", "x"}, "start: wrong number of arguments"},
		{[]string{"start", "x", "-1"}, `K "-1"`},
		{[]string{"stop", "x", "1", "TERM", "now"}, "stop: wrong number of arguments"},
		{[]string{"exec", "x", "1"}, "exec: wrong number of arguments"},
		{[]string{"loss", "x", "1"}, "loss: wrong number of arguments"},
		{[]string{"down"}, "down: wrong number of arguments"},
		{[]string{"down", "x", "y"}, "down: wrong number of arguments"},
	} {
		err := run(tc.args, io.Discard)
		var u errUsage
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
