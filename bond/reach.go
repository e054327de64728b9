package bond

import "time"

// A port that is up but fails every connection (ipoib's reach.go) is left
// as a port that is down would be, while another reaches its peers. Out
// of use it makes no connections that could show it healed, so after a
// hold it is let try again; the hold doubles each time it fails again
// (30 s, 1 min, ... 10 min), so that a broken port costs a few seconds of
// failed connections now and then, not a flap. A connection that comes up
// on it (a rail's) clears it at once, and the hold.
const (
	reachHold    = 30 * time.Second
	maxReachHold = 10 * time.Minute
)

// checkReach takes each leg's Unreachable; it reports whether one changed
// (the bond reselects). Bond goroutine.
func (b *Bond) checkReach(now time.Time) bool {
	changed := false
	for _, l := range b.legs {
		was := l.unreachable
		began, retry := l.reachStep(l.iface.Unreachable(), now)
		if began {
			b.log.Warn("port fails every connection", "if", b.Name(), "port", l.iface.DeviceName(), "retry_in", l.hold)
		}
		if retry {
			l.iface.ForgetUnreachable()
		}
		changed = changed || was != l.unreachable
	}
	return changed
}

// reachStep takes what the leg's port says (unreachable or not) at now:
// whether it just began to fail every connection, and whether its hold is
// over and it may be tried again.
func (l *leg) reachStep(unreachable bool, now time.Time) (began, retry bool) {
	switch {
	case unreachable && !l.unreachable:
		l.hold = min(max(2*l.hold, reachHold), maxReachHold)
		l.retryAt = now.Add(l.hold)
		began = true
	case unreachable && now.After(l.retryAt):
		unreachable, retry = false, true
	case !unreachable && l.unreachable && now.Before(l.retryAt):
		l.hold = 0 // a connection came up on it: healed
	}
	l.unreachable = unreachable
	return began, retry
}
