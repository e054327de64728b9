// Package sapath keeps the path records an InfiniBand IPoIB interface
// addresses its unicast peers by: one per destination GID, asked of the
// subnet administrator, refreshed, and retried with back-off when the SA
// does not answer. It converts a record into the ib.Path of address
// handles and RC/UC RTR transitions and into the cm.Path of a REQ, as the
// kernel does (docs/ipoib-cm.md §4.1, §7.5).
//
// The Cache is a plain state machine in the style of cm.Engine: its owner
// (an event loop) asks it with Lookup, starts the queries Due returns,
// hands the answers to Done and wakes at Next. It never starts a
// goroutine or reads a clock. The queries themselves block for up to the
// SA client's timeouts, so they run elsewhere: Worker runs them one at a
// time on its own goroutine.
//
// The seam is Querier: anything that answers a PathRecord query (umadsa's
// Client on a real port, a fake in tests). sapath never imports a
// transport.
package sapath
