package control

import (
	"errors"
	"fmt"
	"strings"
)

// Code is the kind of a daemon's refusal, as the wire carries it.
type Code string

// The codes. A daemon sends CodeFailed for what it gave no code.
const (
	CodeNotRoot        Code = "not-root"        // the peer is not root
	CodeBadRequest     Code = "bad-request"     // not a request, or too long
	CodeUnknownCommand Code = "unknown-command" // a Cmd the daemon does not know
	CodeInvalid        Code = "invalid"         // an argument the daemon cannot take as it is
	CodeExists         Code = "exists"          // the child asked for, or its name, P_Key or owner, is taken
	CodeNoChild        Code = "no-child"        // child-del: no such child
	CodeNotChild       Code = "not-child"       // child-del: that is the first interface
	CodeNotParent      Code = "not-parent"      // child-add or -del asked of a child's socket
	CodeFailed         Code = "failed"          // the daemon tried and failed
)

// Error is a daemon's refusal: Msg for people, Code for programs.
// errors.Is matches it with the Err value of its code (or any *Error of
// the same code), whatever its message.
type Error struct {
	Code  Code
	Msg   string
	cause error // the daemon's side: what Msg says, for errors.Is and As
}

func (e *Error) Error() string { return e.Msg }

// Is matches any *Error of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func (e *Error) Unwrap() error { return e.cause }

// The refusals, one per code, for errors.Is.
var (
	ErrNotRoot        = &Error{Code: CodeNotRoot, Msg: "permission denied: only root may query ipoibd (run it with sudo)"}
	ErrBadRequest     = &Error{Code: CodeBadRequest, Msg: "bad request"}
	ErrUnknownCommand = &Error{Code: CodeUnknownCommand, Msg: "unknown command"}
	ErrInvalid        = &Error{Code: CodeInvalid, Msg: "invalid argument"}
	ErrExists         = &Error{Code: CodeExists, Msg: "exists"}
	ErrNoChild        = &Error{Code: CodeNoChild, Msg: "no such child"}
	ErrNotChild       = &Error{Code: CodeNotChild, Msg: "not a child"}
	ErrNotParent      = &Error{Code: CodeNotParent, Msg: "not the parent"}
	ErrFailed         = &Error{Code: CodeFailed, Msg: "failed"}
)

// Errorf is a refusal of code with the message fmt.Errorf makes of
// format and args (which may wrap an error with %w).
func Errorf(code Code, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: err.Error(), cause: err}
}

// WithCode gives err, nil or not, the refusal code code; its message
// stays err's.
func WithCode(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Msg: err.Error(), cause: err}
}

// legacyCode is the code of a refusal from a daemon before codes, which
// sent its message alone: during an upgrade the new CNI plugin still
// tells a child that is gone (its DEL must succeed) from a failure. Only
// for such replies; a daemon with codes is never read by its text.
func legacyCode(msg string) Code {
	switch {
	case strings.HasPrefix(msg, "no child "):
		return CodeNoChild
	case msg == ErrNotRoot.Msg:
		return CodeNotRoot
	case strings.HasPrefix(msg, "unknown command "):
		return CodeUnknownCommand
	case msg == "bad request":
		return CodeBadRequest
	}
	return CodeFailed
}

// CallError is an exchange that ended short of an answer: Op is "dial"
// (no daemon serves the interface: errors.Is(err, ErrNoDaemon)), "write"
// (the request could not be sent and no answer came), "read" (no answer)
// or "decode" (an answer that is not the reply asked for).
type CallError struct {
	Op     string
	Ifname string
	Err    error
}

// ErrNoDaemon matches a CallError of Op "dial": nothing listens on the
// interface's socket in this network namespace.
var ErrNoDaemon = errors.New("no ipoibd serves the interface in this network namespace")

func (e *CallError) Error() string {
	return fmt.Sprintf("ipoibd control %s %s: %v", e.Op, SocketName(e.Ifname), e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Is matches ErrNoDaemon for a failed dial.
func (e *CallError) Is(target error) bool { return target == ErrNoDaemon && e.Op == "dial" }
