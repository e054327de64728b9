package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdWatcher calls a drain function on its own goroutine whenever a file
// descriptor becomes readable. The wait goes through the Go runtime's
// poller, so no OS thread sits blocked in read (libibverbs' completion
// channels and async event fds are pollable).
type fdWatcher struct {
	f    *os.File
	done chan struct{}
}

// watchFD makes fd non-blocking and starts the watcher. drain must consume
// everything pending and return false once it would block (EAGAIN), or true
// to end the watcher on an error it cannot recover from. The caller keeps
// fd: the watcher polls a duplicate, which stop closes, so the library that
// owns fd can still close it.
func watchFD(fd int, name string, drain func() (stop bool)) (*fdWatcher, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("verbs: %s: set non-blocking: %w", name, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("verbs: %s: dup: %w", name, err)
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("verbs: %s: %w", name, err)
	}
	w := &fdWatcher{f: f, done: make(chan struct{})}
	stop := false
	read := func(uintptr) bool {
		stop = drain()
		return stop
	}
	go func() {
		defer close(w.done)
		// Read calls read, and while it returns false waits for the fd
		// to be readable and calls it again; it fails once f is closed.
		for !stop {
			if err := rc.Read(read); err != nil {
				return
			}
		}
	}()
	return w, nil
}

// WatchFD is watchFD for a file descriptor of another rdma-core library;
// the returned stop is the watcher's. It is exported for package rdmacm,
// whose librdmacm event channel is waited on as this provider waits on its
// completion channels and async events, so that both share one tested way
// of doing it.
func WatchFD(fd int, name string, drain func() (stop bool)) (stop func(), err error) {
	w, err := watchFD(fd, name, drain)
	if err != nil {
		return nil, err
	}
	return w.stop, nil
}

// stop ends the watcher and waits for its goroutine; drain is not running
// when it returns.
func (w *fdWatcher) stop() {
	_ = w.f.Close()
	<-w.done
}
