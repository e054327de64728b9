//go:build rdma

package verbs

import "C"

import (
	"errors"
	"fmt"
	"syscall"
)

// verbError reports a failed verb with its errno. Verbs either return an
// errno value or set errno (which cgo hands back as an error); both end here.
func verbError(verb string, errno syscall.Errno) error {
	if errno == 0 {
		errno = syscall.EIO // a provider failed without saying why
	}
	return fmt.Errorf("verbs: %s: %w", verb, errno)
}

// errnoValue reads the errno a verb returned (some return it negated).
func errnoValue(rc C.int) syscall.Errno {
	if rc < 0 {
		rc = -rc
	}
	return syscall.Errno(rc)
}

// cgoErrno extracts the errno of cgo's second return value.
func cgoErrno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// Errors of work requests naming objects of another device or provider.
// They are values so that the posting paths allocate nothing even when they
// fail.
var (
	errForeignMR  = errors.New("verbs: work request names a memory region of another device")
	errForeignAH  = errors.New("verbs: UD send needs an address handle of this device")
	errForeignCQ  = errors.New("verbs: CQ belongs to another device or provider")
	errForeignSRQ = errors.New("verbs: SRQ belongs to another device or provider")
	errForeignQP  = errors.New("verbs: QP belongs to another device or provider")
	errHasSRQ     = errors.New("verbs: this QP receives from an SRQ; post receives there")
)
