package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// ifCommand is the command line of a command sent to one interface's
// daemon: an optional IFNAME (also --ifname), then the command's own
// arguments; -j and --help as everywhere.
type ifCommand struct {
	name   string
	fs     *pflag.FlagSet
	ifname *string
	asJSON *bool
	help   *bool
}

// newIfCommand makes the flag set of command name (e.g. "child add"); the
// command may add flags of its own before parse.
func newIfCommand(name string) *ifCommand {
	fs, ifname, asJSON := queryFlags(name)
	fs.Usage = func() {} // --help prints the command's usage to stdout
	help := fs.BoolP("help", "h", false, "print this command's usage and exit")
	return &ifCommand{name: name, fs: fs, ifname: ifname, asJSON: asJSON, help: help}
}

// parse reads args, which must hold the arguments named by want after the
// optional IFNAME, and returns them. done is true when --help printed the
// usage and there is nothing more to do.
func (c *ifCommand) parse(args []string, out io.Writer, want ...string) (rest []string, done bool, err error) {
	rest, done, err = c.parseArgs(args, out, want)
	return rest, done, withExit(exitUsage, err)
}

func (c *ifCommand) parseArgs(args []string, out io.Writer, want []string) (rest []string, done bool, err error) {
	if err := c.fs.Parse(args); err != nil {
		return nil, false, fmt.Errorf("%s: %w (see ipoibd %s --help)", c.name, err, c.name)
	}
	if *c.help {
		commandUsage(out, c.name, c.fs)
		return nil, true, nil
	}
	pos := c.fs.Args()
	switch {
	case len(pos) == len(want)+1 && c.fs.Changed("ifname") && pos[0] != *c.ifname:
		return nil, false, fmt.Errorf("%s: interface %q and --ifname %q disagree", c.name, pos[0], *c.ifname)
	case len(pos) == len(want)+1:
		*c.ifname, pos = pos[0], pos[1:]
	case len(pos) != len(want) && len(want) == 0:
		return nil, false, fmt.Errorf("%s takes one interface name, got %q", c.name, strings.Join(pos, " "))
	case len(pos) != len(want):
		return nil, false, fmt.Errorf("%s takes [IFNAME] %s, got %q", c.name, strings.Join(want, " "), strings.Join(pos, " "))
	}
	if err := checkIfname(*c.ifname); err != nil {
		return nil, false, err
	}
	return pos, false, nil
}

// checkIfname refuses what the kernel would not take as an interface name.
func checkIfname(name string) error {
	if name == "" || len(name) >= unix.IFNAMSIZ || strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("%q is not an interface name (at most %d characters, no '/', ':' or spaces)", name, unix.IFNAMSIZ-1)
	}
	return nil
}
