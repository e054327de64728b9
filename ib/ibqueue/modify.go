package ibqueue

import (
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
)

// CheckModify checks a QP state transition as verbs does before the
// provider applies it: Reset→Init (again Init), Init→RTR (a connected QP
// needs a valid path MTU and destination QPN), RTR→RTS (again RTS), and
// Error or Reset from any state. It returns ib.ErrBadState for a
// transition verbs refuses and a descriptive error for missing
// attributes, which begins with provider ("softib") and names the QP.
func CheckModify(provider string, num ib.QPN, typ ib.QPType, cur ib.QPState, m *ib.QPModify) error {
	switch m.State {
	case ib.StateInit:
		if cur != ib.StateReset && cur != ib.StateInit {
			return ib.ErrBadState
		}
	case ib.StateRTR:
		if cur != ib.StateInit {
			return ib.ErrBadState
		}
		if typ != ib.UD && (!m.PathMTU.Valid() || !m.DestQPN.Valid()) {
			return fmt.Errorf("%s: modify QP %v to RTR: path MTU %v, destination QPN %v", provider, num, m.PathMTU, m.DestQPN)
		}
	case ib.StateRTS:
		if cur != ib.StateRTR && cur != ib.StateRTS {
			return ib.ErrBadState
		}
	case ib.StateError, ib.StateReset:
	default:
		return ib.ErrBadState
	}
	return nil
}
