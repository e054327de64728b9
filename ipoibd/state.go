package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ipoibd/ipoibd/control"
	"golang.org/x/sys/unix"
)

// The state file: what a daemon must know to take back, after a restart,
// the children it served (their TUNs are persistent, tun/persist.go):
// for each, the request that made it (P_Key, name, addresses, mode, MTU,
// the pod's namespace and owner) and which namespace that was.
//
// It is JSON lines, so that a truncated file still gives its whole
// lines: first a header, then one child per line.
//
//	{"version":1,"parent":"ib0","netns_cookie":4099,"netns_ino":4026531840}
//	{"pkey":"0x8001","name":"ib0.8001","addrs":["172.16.9.1/24"]}
//	{"pkey":"0x8001","name":"net1","addrs":["172.30.1.10/24"],"netns":"/run/netns/cni-1","owner":"cni/ib-8001/c1/net1","netns_dev":4,"netns_ino":4026532581}
//
// Compatibility: a version only adds fields, which older daemons ignore;
// a daemon reads a newer file for the fields it knows and says so. A
// change older daemons could not read that way needs a new file name.

// stateVersion is the version this daemon writes.
const stateVersion = 1

// stateHeader is the file's first line. The daemon's namespace is named
// by its inode (in the file name too) and cookie: an inode is reused
// once a namespace is gone, a cookie never during a boot, so a file a
// namespace that is gone left is told apart.
type stateHeader struct {
	Version     int    `json:"version"`
	Parent      string `json:"parent"`
	NetnsCookie uint64 `json:"netns_cookie,omitempty"`
	NetnsIno    uint64 `json:"netns_ino,omitempty"`
	WrittenBy   string `json:"written_by,omitempty"`
}

// stateChild is one child: the request that made it (its name as made)
// and, for a pod's, the identity of the namespace its path named.
type stateChild struct {
	control.ChildRequest
	// LinkAddr is the child's link address when the file was written:
	// after a restart its announcements name it (ipoib.Config.Replaces).
	LinkAddr string `json:"link_addr,omitempty"`
	NetnsDev uint64 `json:"netns_dev,omitempty"`
	NetnsIno uint64 `json:"netns_ino,omitempty"`
}

// stateDir is where state files live: systemd's RuntimeDirectory (kept
// across a restart, removed by a stop: RuntimeDirectoryPreserve=restart)
// or /run/ipoibd.
func stateDir() string {
	if d := os.Getenv("RUNTIME_DIRECTORY"); d != "" {
		d, _, _ = strings.Cut(d, ":")
		return d
	}
	return "/run/ipoibd"
}

// statePath is the state file of the daemon of parent in the namespace
// whose inode is ino.
func statePath(dir, parent string, ino uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s.ns%d.state", parent, ino))
}

// stateProblem is what was wrong with a state file: each kind becomes
// one log line.
type stateProblem struct {
	what string
	err  error
	// stale: a leftover of a namespace that is gone, which a new daemon
	// there overwrites; nothing for an operator to do, so not a warning.
	stale bool
}

// readState reads a state file: its header and the children on its whole
// lines. A missing file is no problem (nothing to adopt); a file that is
// not one, truncated, or from a newer version gives what it can and says
// what was wrong.
func readState(r io.Reader) (h stateHeader, kids []stateChild, problems []stateProblem) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if line == 1 {
			if err := json.Unmarshal(b, &h); err != nil || h.Version < 1 {
				return h, nil, []stateProblem{{what: "not a state file (its first line is no header)", err: err}}
			}
			if h.Version > stateVersion {
				problems = append(problems, stateProblem{what: fmt.Sprintf("written by a newer ipoibd (version %d, this one writes %d): reading the fields this one knows", h.Version, stateVersion)})
			}
			continue
		}
		var c stateChild
		if err := json.Unmarshal(b, &c); err != nil || c.PKey == "" || c.Name == "" {
			if err == nil {
				err = errors.New("no pkey or name")
			}
			problems = append(problems, stateProblem{what: fmt.Sprintf("line %d unreadable (truncated?): skipped", line), err: err})
			continue
		}
		kids = append(kids, c)
	}
	if err := sc.Err(); err != nil {
		problems = append(problems, stateProblem{what: "read failed", err: err})
	}
	if line == 0 {
		problems = append(problems, stateProblem{what: "empty (truncated?)"})
	}
	return h, kids, problems
}

// writeState replaces the file at path with h and kids, atomically (a
// reader sees the old file or the new one); with no children there is
// nothing to keep and the file goes.
func writeState(path string, h stateHeader, kids []stateChild) error {
	if len(kids) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	h.Version = stateVersion
	if err := enc.Encode(h); err != nil {
		return err
	}
	for _, c := range kids {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// soNetnsCookie is SO_NETNS_COOKIE (Linux 5.14), which x/sys lacks.
const soNetnsCookie = 71

// ownNetnsCookie is the cookie of the daemon's network namespace (0 where
// the kernel has none).
func ownNetnsCookie() uint64 {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	var cookie uint64
	l := uint32(unsafe.Sizeof(cookie))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, soNetnsCookie, uintptr(unsafe.Pointer(&cookie)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return 0
	}
	return cookie
}
