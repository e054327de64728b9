package ud

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// unhex decodes hex written with spaces, '|' separators and // comments.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	var clean strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		line, _, _ = strings.Cut(line, "//")
		for _, r := range line {
			if r != ' ' && r != '\t' && r != '|' && r != ':' {
				clean.WriteRune(r)
			}
		}
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// wantField fails unless err is an *ib.FieldError for format and field.
func wantField(tb testing.TB, err error, format, field string) {
	tb.Helper()
	var fe *ib.FieldError
	if !errors.As(err, &fe) {
		tb.Fatalf("error %v (%T), want *ib.FieldError %s/%s", err, err, format, field)
	}
	if fe.Format != format || fe.Field != field {
		tb.Fatalf("error names %s/%s (%v), want %s/%s", fe.Format, fe.Field, err, format, field)
	}
}
