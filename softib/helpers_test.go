package softib

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// unhex decodes hex octets separated by spaces, newlines and "|" (field
// boundaries); "#" starts a comment that runs to the end of the line.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(strings.ReplaceAll(line, "|", " ")), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantField fails unless err is a *ib.FieldError naming format and field.
func wantField(t *testing.T, err error, format, field string) {
	t.Helper()
	var fe *ib.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want *ib.FieldError %s/%s", err, err, format, field)
	}
	if fe.Format != format || fe.Field != field {
		t.Fatalf("error %q names %s/%s, want %s/%s", err, fe.Format, fe.Field, format, field)
	}
}
