package cm

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Who sent a MAD, as far as the fabric vouches for it. A REQ's body says
// whatever its sender likes (port GID, CA GUID, LIDs); the MAD's address
// is what the provider saw: on RoCE framing (softib, rxe) the GRH's source
// GID, which is the underlay's IP source; on InfiniBand the LRH's source
// LID, which the sending adapter fills from its port's LID (a GRH's SGID
// also comes from the sender's GID table, but a GRH-less MAD, the kernel's
// usual inside a subnet, has none). So a peer is recognised by, and the
// setup slots are shared out by, that source: the LID on InfiniBand,
// the GID elsewhere. Only a MAD with neither (a provider that cannot
// tell) falls back on the REQ's claimed port GID.

// sourceKey is a MAD's source as the fabric shows it: lid on InfiniBand,
// else gid.
type sourceKey struct {
	lid uint16
	gid ib.GID
}

// sourceOf is from's source; claimed is the REQ's word, used only when
// from shows nothing.
func sourceOf(from ib.MADAddr, claimed ib.GID) sourceKey {
	switch {
	case from.LIDRouted():
		return sourceKey{lid: from.Path.DLID}
	case from.GID != (ib.GID{}):
		return sourceKey{gid: from.GID}
	}
	return sourceKey{gid: claimed}
}

func (k sourceKey) String() string {
	if k.lid != 0 {
		return fmt.Sprintf("LID %#x", k.lid)
	}
	return k.gid.String()
}

// fromPeer reports whether a MAD comes from c's peer as far as the fabric
// shows: the same source GID when both are known, and on InfiniBand the
// same source LID once c has one (srcLID: the LID its REQ came from on
// the passive side, the LID of its first answer on the active side: a
// peer under an LMC may answer from another of its LIDs than the one the
// SA's path named, so that one is not required). What the fabric does not
// show cannot be compared and is taken.
func fromPeer(from ib.MADAddr, c *Comm) bool {
	if from.GID != (ib.GID{}) && from.GID != c.RemoteGID {
		return false
	}
	return !from.LIDRouted() || c.srcLID == 0 || from.Path.DLID == c.srcLID
}

// floodLogEvery bounds the engine's log lines about refused sources.
const floodLogEvery = 10 * time.Second

// floodLog tells, at most once per floodLogEvery, which source had REQs
// refused because it already held its share of the setup slots, and how
// many were refused since the last line.
type floodLog struct {
	at      time.Time
	refused uint64 // since the last line
	last    sourceKey
}

func (f *floodLog) refuse(log *slog.Logger, now time.Time, src sourceKey, limit int) {
	f.refused++
	f.last = src
	if log == nil || (!f.at.IsZero() && now.Sub(f.at) < floodLogEvery) {
		return
	}
	log.Warn("cm: refusing REQs from a source that holds its share of the setup slots",
		"source", src.String(), "in_setup_limit", limit, "refused_since_last_line", f.refused)
	f.at, f.refused = now, 0
}
