package ipoib

import "testing"

// TestRefusalMessage: the log line of a connection given up on says what
// happened; only a REJ is a refusal.
func TestRefusalMessage(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{"rejected: consumer reject", "connection refused"},
		{"rejected: invalid service ID", "connection refused"},
		{"bad REP", "connection refused"},
		{"timeout", "connection attempt unanswered"},
		{"send failed on the RC connection, QPN 0x000012 to the peer's QPN 0x000034", "connection lost: a send failed"},
	} {
		if got := refusalMessage(tc.reason); got != tc.want {
			t.Errorf("refusalMessage(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}
