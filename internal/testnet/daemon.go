package testnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How long Start waits for a daemon to answer, and Stop for it to exit:
// bounds for a daemon that never will, not expectations. On the simulated
// InfiniBand subnet, beside a CPU hog, a start took more than 10 s.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
	pollEvery    = 50 * time.Millisecond
)

// Start runs Daemon on host k with flags after --underlay (and, unless
// flags has its own --addr, ib0's addresses IPv4(k)/24 and IPv6(k)/64),
// its output appended to LogPath(k), and returns once its control socket
// answers `ipoibd show` for the interface of flags' --ifname (default ib0)
// in flags' --netns (default host k). It fails, with the daemon's log,
// when the daemon exits first or does not answer within 10 s. The daemon
// outlives the caller; Stop or Down ends it.
func (c *Cluster) Start(k int, flags ...string) error {
	if fi, err := os.Stat(c.Daemon); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("no ipoibd binary at %q (run make build)", c.Daemon)
	}
	ifname, ifns := "ib0", c.Host(k)
	ownAddr := false
	for i, f := range flags {
		name, value, hasValue := strings.Cut(f, "=")
		if !hasValue && i+1 < len(flags) {
			value = flags[i+1]
		}
		switch name {
		case "--ifname", "-ifname":
			ifname = value
		case "--netns", "-netns":
			ifns = value
		case "--addr", "-addr":
			ownAddr = true
		}
	}
	args := []string{"--underlay", c.Underlay(k).String()}
	if !ownAddr {
		args = append(args, "--addr", c.IPv4(k).String()+"/24", "--addr", c.IPv6(k).String()+"/64")
	}
	log, err := os.OpenFile(c.LogPath(k), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	cmd := c.Command(k, c.Daemon, append(args, flags...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if c.Env != nil {
		cmd.Env = append(os.Environ(), c.Env(k)...)
	}
	cmd.Dir = c.Dir
	err = cmd.Start()
	log.Close()
	if err != nil {
		return fmt.Errorf("starting ipoibd on %s: %w", c.Host(k), err)
	}
	pid := cmd.Process.Pid
	// Opened before anything can reap the daemon, so it is surely ours.
	pidfd, err := unix.PidfdOpen(pid, 0)
	// A caller that lives on (a test) reaps its daemon; the command's
	// daemons pass to init when it exits.
	go func() {
		_ = cmd.Wait()
		c.ends.Store(k, daemonEnd{pid, cmd.ProcessState, time.Now()})
	}()
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if err := os.WriteFile(c.pidPath(k), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	for deadline := time.Now().Add(startTimeout); ; {
		if nsCommand(ifns, c.Daemon, "show", "--ifname", ifname).Run() == nil {
			return nil
		}
		// The pause between asks is also the watch for an early exit.
		exited, err := awaitPidfd(pidfd, pollEvery)
		switch {
		case err != nil:
			return err
		case exited:
			return fmt.Errorf("ipoibd on %s exited before it answered; its log:\n%s", c.Host(k), c.logTail(k))
		case time.Now().After(deadline):
			return fmt.Errorf("ipoibd on %s did not answer within %v; its log:\n%s", c.Host(k), startTimeout, c.logTail(k))
		}
	}
}

// Stop sends sig to host k's daemon and waits until it has exited. A host
// without a daemon, or whose daemon is gone, is no error.
func (c *Cluster) Stop(k int, sig syscall.Signal) error {
	pid, err := c.Pid(k)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	os.Remove(c.pidPath(k))
	pidfd, ok, err := c.openDaemon(k, pid)
	if !ok || err != nil {
		return err
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("signalling ipoibd on %s (pid %d): %w", c.Host(k), pid, err)
	}
	exited, err := awaitPidfd(pidfd, stopTimeout)
	if err == nil && !exited {
		err = fmt.Errorf("ipoibd on %s (pid %d) still runs %v after %v", c.Host(k), pid, stopTimeout, unix.SignalName(sig))
		dumpGoroutines(pidfd)
	}
	return err
}

// dumpGoroutines makes a daemon that would not stop write every
// goroutine's stack to its log (Go's SIGQUIT), so the log the test prints
// says where it hangs.
func dumpGoroutines(pidfd int) {
	if unix.PidfdSendSignal(pidfd, unix.SIGQUIT, nil, 0) == nil {
		awaitPidfd(pidfd, 5*time.Second)
	}
}

// stopForGood stops host k's daemon with SIGTERM, and SIGKILL if that
// does not end it: for Down. A process started with host k's --underlay
// that the pid file does not name (a daemon whose namespace, given with
// --netns, is already gone) is killed too.
func (c *Cluster) stopForGood(k int) error {
	defer c.killStragglers(k)
	pid, err := c.Pid(k)
	if err != nil {
		return nil // no daemon, or a pid file cut short by a crash
	}
	if c.Stop(k, unix.SIGTERM) == nil {
		return nil
	}
	pidfd, ok, err := c.openDaemon(k, pid)
	if !ok || err != nil {
		return err
	}
	defer unix.Close(pidfd)
	_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	if exited, err := awaitPidfd(pidfd, stopTimeout); err != nil || !exited {
		return fmt.Errorf("ipoibd on %s (pid %d) survives SIGKILL: %v", c.Host(k), pid, err)
	}
	return nil
}

// openDaemon opens a pidfd on pid if it is host k's daemon: a process in
// host k's namespace, or (a daemon with --netns runs in the namespace it
// was given) one started with host k's --underlay. After a crash, the pid
// may have passed to an unrelated process; that one is left alone (ok
// false).
func (c *Cluster) openDaemon(k, pid int) (pidfd int, ok bool, err error) {
	pidfd, err = unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, false, nil
	}
	if err != nil {
		return -1, false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	var its, host unix.Stat_t
	inHost := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &its) == nil &&
		unix.Stat(filepath.Join("/run/netns", c.Host(k)), &host) == nil &&
		its.Dev == host.Dev && its.Ino == host.Ino
	if !inHost && !c.startedAs(k, pid) {
		unix.Close(pidfd)
		return -1, false, nil
	}
	return pidfd, true, nil
}

// killStragglers kills every process started as host k's daemon and
// waits (bounded) for each to go.
func (c *Cluster) killStragglers(k int) {
	for _, pid := range c.Stragglers(k) {
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		_, _ = awaitPidfd(pidfd, stopTimeout)
		unix.Close(pidfd)
	}
}

// Stragglers lists the live processes started as host k's daemon (its
// --underlay), whatever namespace they are in: none after Down.
func (c *Cluster) Stragglers(k int) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil && c.startedAs(k, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startedAs reports whether pid's command line is that of host k's
// daemon: --underlay and host k's underlay address.
func (c *Cluster) startedAs(k, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--underlay" && args[i+1] == c.Underlay(k).String() {
			return true
		}
	}
	return false
}

// awaitPidfd waits up to d for the process of pidfd to exit.
func awaitPidfd(pidfd int, d time.Duration) (exited bool, err error) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); ; {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		return n > 0, nil
	}
}

// Pid is host k's daemon's process ID, as Start recorded it.
func (c *Cluster) Pid(k int) (int, error) {
	b, err := os.ReadFile(c.pidPath(k))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.pidPath(k), err)
	}
	return pid, nil
}

// daemonEnd is how and when a daemon Start ran ended.
type daemonEnd struct {
	pid   int
	state *os.ProcessState
	at    time.Time
}

// Ended says how host k's daemon ended without Stop ("exit status 5 at
// 21:20:50.123", "signal: killed at …"): the one its pid file names, if
// this Cluster started it. It is "" while that daemon runs, after Stop
// (which removes the pid file) and after a later Start.
func (c *Cluster) Ended(k int) string {
	v, ok := c.ends.Load(k)
	if !ok {
		return ""
	}
	e := v.(daemonEnd)
	if pid, err := c.Pid(k); err != nil || pid != e.pid {
		return ""
	}
	return e.state.String() + " at " + e.at.Format("15:04:05.000")
}

// LogPath is the file host k's daemons write to, each Start appending.
func (c *Cluster) LogPath(k int) string { return filepath.Join(c.dir, fmt.Sprintf("h%d.log", k)) }

func (c *Cluster) pidPath(k int) string { return filepath.Join(c.dir, fmt.Sprintf("h%d.pid", k)) }

// logTail: the end of host k's log, for an error message.
func (c *Cluster) logTail(k int) string {
	b, err := os.ReadFile(c.LogPath(k))
	if err != nil {
		return err.Error()
	}
	const most = 4096
	if len(b) > most {
		b = append([]byte("..."), b[len(b)-most:]...)
	}
	return string(b)
}

// ParseSignal reads a signal as kill(1) takes it: TERM, SIGTERM or 15.
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
