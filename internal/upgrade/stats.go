// Package upgrade is tollgate's binary upgrade in place (README,
// "Upgrading in place"): the old process starts the new one from the same
// command line with its listening sockets and a state channel (a
// socketpair), waits until it is ready, stops accepting, hands over every
// inFlightConn limiter's counts, and forwards the release of each of its
// connections as it ends, so that the per-client limits stay one budget
// across both processes. It also speaks systemd's notify protocol.
//
// The process side (what to hand over, when to stop accepting) is main.go's;
// this package is the protocol and the processes.
package upgrade

import (
	"sync/atomic"
)

// Stats are a process's upgrade and handover counters, for the API and
// metrics. The zero value is ready; a process has one.
type Stats struct {
	// Generation is 1 for a process started by hand, its predecessor's
	// plus one for a process started by an upgrade.
	Generation     atomic.Uint64
	PredecessorPID atomic.Int64

	// Received: what this process imported from its predecessor.
	Received          Counts
	ReleasesReceived  atomic.Int64
	ReleasesUnmatched atomic.Int64 // releases of nothing counted here (ignored)
	AcquiresAnswered  atomic.Int64
	Outstanding       atomic.Int64 // the predecessor's connections still counted here
	ReleasedAtEnd     atomic.Int64 // released when the channel ended (the predecessor was gone)
	PredecessorDone   atomic.Bool
	PredecessorLost   atomic.Bool // its channel ended without a bye (killed, crashed)

	// Sent: what this process handed to its successor.
	Sent              Counts
	ReleasesForwarded atomic.Int64
	AcquiresAsked     atomic.Int64
	AcquiresGranted   atomic.Int64
	SuccessorPID      atomic.Int64

	Attempts  atomic.Int64
	Failures  atomic.Int64
	LastError atomic.Pointer[string]
}

// Counts is a snapshot's size.
type Counts struct {
	Limiters    atomic.Int64
	Keys        atomic.Int64
	Connections atomic.Int64
}
