package ib

import "fmt"

// FieldError reports a wire field that is missing, truncated or inconsistent.
// Decoders of every package return it so that a dropped packet can be logged
// with the name of what was wrong.
type FieldError struct {
	Format string // the structure being decoded, e.g. "BTH"
	Field  string // the offending field, e.g. "PadCnt"
	Reason string // what was wrong with it
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Format, e.Field, e.Reason)
}

// ErrField builds a *FieldError.
func ErrField(format, field, reason string, args ...any) error {
	return &FieldError{Format: format, Field: field, Reason: fmt.Sprintf(reason, args...)}
}

// NeedLen returns a *FieldError naming field when b is shorter than n octets.
func NeedLen(format, field string, b []byte, n int) error {
	if len(b) < n {
		return ErrField(format, field, "truncated: have %d octets, need %d", len(b), n)
	}
	return nil
}
