package ipoib

import "log/slog"

// The periodic log report of dropped packets.

// reportDrops logs, once per interval, every drop and error counter that
// grew, so bad input shows in the log without flooding it: routine drops
// at INFO, those an operator must look into (dropLevel) in a WARN line
// of their own.
func (c *control) reportDrops() {
	c.dropsAt = c.now
	var routine, serious []any
	for k := range numCounters {
		v := c.i.ctr[k].Load()
		if d := v - c.dropsSeen[k]; d > 0 && isDropCounter(k) {
			if c.dropLevel(k) >= slog.LevelWarn {
				serious = append(serious, counterNames[k], d)
			} else {
				routine = append(routine, counterNames[k], d)
			}
		}
		c.dropsSeen[k] = v
	}
	if len(routine) > 0 {
		c.i.log.Info("packets dropped", append([]any{"in", dropReportInterval}, routine...)...)
	}
	if len(serious) > 0 {
		c.i.log.Warn("packets lost: resources exhausted or a device failing", append([]any{"in", dropReportInterval}, serious...)...)
	}
}

// dropLevel is how loud a drop cause is in the report. Most are what peers,
// the kernel and the fabric do (no neighbor, no route, too big, a queue
// bounded on purpose, forged or malformed input, a connection that died)
// and are routine. Those left mean the daemon ran short or a device
// failed: the control goroutine's inbox or slots full, receive
// completions in error, TUN writes failing while the link is up (down,
// the kernel refuses them: the operator's doing).
func (c *control) dropLevel(k counter) slog.Level {
	switch k {
	case ctlDropBusy, rxErrors:
		return slog.LevelWarn
	case rxDropTUN:
		if c.linkUp {
			return slog.LevelWarn
		}
	}
	return slog.LevelInfo
}
