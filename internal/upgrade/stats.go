// Package upgrade is tollgate's binary upgrade in place
// (docs/operations/upgrading.md): the old process starts the new one from the same
// command line with its listening sockets and a state channel (a
// socketpair), waits until it is ready, stops accepting, hands over every
// inFlightConn limiter's counts, every rateLimit limiter's buckets and every
// capped server's count, hands over the connections it accepted and had not
// yet routed (their sockets), and forwards the release of each of its
// connections as it ends, so that the per-client limits and the servers'
// maxConn stay one budget across both processes. It also speaks
// systemd's notify protocol.
//
// The process side (what to hand over, when to stop accepting) is internal/process's;
// this package is the protocol and the processes.
package upgrade

import (
	"errors"
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
	// The predecessor's connections to capped servers: counted here at
	// the import, and the releases received since.
	CapConnections      atomic.Int64
	CapReleasesReceived atomic.Int64
	// Connections the predecessor had accepted and not routed, adopted
	// here (the connection channel).
	UnroutedReceived atomic.Int64

	// Sent: what this process handed to its successor.
	Sent              Counts
	ReleasesForwarded atomic.Int64
	AcquiresAsked     atomic.Int64
	AcquiresGranted   atomic.Int64
	SuccessorPID      atomic.Int64
	// This process's connections to capped servers handed over, and the
	// releases forwarded since.
	CapConnectionsSent   atomic.Int64
	CapReleasesForwarded atomic.Int64
	// Connections accepted and not routed here, handed to the successor;
	// and those it could not be given (closed).
	UnroutedSent atomic.Int64
	UnroutedLost atomic.Int64

	Attempts  atomic.Int64
	Failures  atomic.Int64
	LastError atomic.Pointer[string]
	// Refused: upgrades asked for and not started (one under way, this
	// process or its predecessor draining). Resumes: handovers undone
	// because the new process ended while this one drained.
	Refused atomic.Int64
	Resumes atomic.Int64
}

// Counts is a snapshot's size.
type Counts struct {
	Limiters    atomic.Int64
	Keys        atomic.Int64
	Connections atomic.Int64
	// The rateLimit limiters and the client keys whose buckets were not
	// full (received: imported into a limiter of the same name).
	RateLimiters atomic.Int64
	RateKeys     atomic.Int64
}

// View is Stats as the API shows them (GET /api/process).
type View struct {
	PID        int    `json:"pid"`
	Generation uint64 `json:"generation"`
	// State: "serving", "upgrading" (a new process is starting), or
	// "draining" (handed over: serving its last connections).
	State          string        `json:"state"`
	PredecessorPID int64         `json:"predecessorPid,omitempty"`
	SuccessorPID   int64         `json:"successorPid,omitempty"`
	Received       *ReceivedView `json:"received,omitempty"`
	Sent           *SentView     `json:"sent,omitempty"`
	Upgrades       UpgradesView  `json:"upgrades"`
}

// ReceivedView is what this process took over from its predecessor.
type ReceivedView struct {
	CountsView
	ReleasesReceived  int64 `json:"releasesReceived"`
	ReleasesUnmatched int64 `json:"releasesUnmatched"`
	AcquiresAnswered  int64 `json:"acquiresAnswered"`
	Outstanding       int64 `json:"outstanding"`
	ReleasedAtEnd     int64 `json:"releasedAtEnd"`
	PredecessorDone   bool  `json:"predecessorDone"`
	PredecessorLost   bool  `json:"predecessorLost"`
	// The predecessor's connections to servers with a maxConn, counted
	// against the caps here, and the releases of them received.
	CapConnections      int64 `json:"capConnections"`
	CapReleasesReceived int64 `json:"capReleasesReceived"`
	// Connections the predecessor accepted and had not routed at the
	// handover, routed here.
	Unrouted int64 `json:"unrouted"`
}

// SentView is what this process handed to its successor.
type SentView struct {
	CountsView
	ReleasesForwarded int64 `json:"releasesForwarded"`
	AcquiresAsked     int64 `json:"acquiresAsked"`
	AcquiresGranted   int64 `json:"acquiresGranted"`
	// This process's connections to servers with a maxConn that the
	// successor counts, and the releases of them forwarded.
	CapConnections       int64 `json:"capConnections"`
	CapReleasesForwarded int64 `json:"capReleasesForwarded"`
	// Connections accepted and not yet routed at the handover, handed to
	// the successor to route; lost: those it could not be given (closed).
	Unrouted     int64 `json:"unrouted"`
	UnroutedLost int64 `json:"unroutedLost"`
}

// CountsView is a snapshot's size.
type CountsView struct {
	Limiters     int64 `json:"limiters"`
	Keys         int64 `json:"keys"`
	Connections  int64 `json:"connections"`
	RateLimiters int64 `json:"rateLimiters"`
	RateKeys     int64 `json:"rateKeys"`
}

// UpgradesView counts the upgrades this process attempted.
type UpgradesView struct {
	Attempts  int64  `json:"attempts"`
	Failures  int64  `json:"failures"`
	LastError string `json:"lastError,omitempty"`
	// Refused: asked for while one was under way or a generation drained
	// (409). Resumed: handovers undone, the new process having ended
	// while this one drained.
	Refused int64 `json:"refused"`
	Resumed int64 `json:"resumed"`
}

func (c *Counts) view() CountsView {
	return CountsView{c.Limiters.Load(), c.Keys.Load(), c.Connections.Load(), c.RateLimiters.Load(), c.RateKeys.Load()}
}

// View returns the counters now; state is the process's state word.
func (s *Stats) View(pid int, state string) View {
	v := View{PID: pid, Generation: s.Generation.Load(), State: state,
		PredecessorPID: s.PredecessorPID.Load(), SuccessorPID: s.SuccessorPID.Load(),
		Upgrades: UpgradesView{Attempts: s.Attempts.Load(), Failures: s.Failures.Load(), Refused: s.Refused.Load(), Resumed: s.Resumes.Load()}}
	if e := s.LastError.Load(); e != nil {
		v.Upgrades.LastError = *e
	}
	if v.PredecessorPID != 0 {
		v.Received = &ReceivedView{CountsView: s.Received.view(), ReleasesReceived: s.ReleasesReceived.Load(),
			ReleasesUnmatched: s.ReleasesUnmatched.Load(), AcquiresAnswered: s.AcquiresAnswered.Load(),
			Outstanding: s.Outstanding.Load(), ReleasedAtEnd: s.ReleasedAtEnd.Load(),
			PredecessorDone: s.PredecessorDone.Load(), PredecessorLost: s.PredecessorLost.Load(),
			CapConnections: s.CapConnections.Load(), CapReleasesReceived: s.CapReleasesReceived.Load(),
			Unrouted: s.UnroutedReceived.Load()}
	}
	if v.SuccessorPID != 0 {
		v.Sent = &SentView{CountsView: s.Sent.view(), ReleasesForwarded: s.ReleasesForwarded.Load(),
			AcquiresAsked: s.AcquiresAsked.Load(), AcquiresGranted: s.AcquiresGranted.Load(),
			CapConnections: s.CapConnectionsSent.Load(), CapReleasesForwarded: s.CapReleasesForwarded.Load(),
			Unrouted: s.UnroutedSent.Load(), UnroutedLost: s.UnroutedLost.Load()}
	}
	return v
}

// Result is a successful upgrade, as POST /api/upgrade answers it.
type Result struct {
	PID         int    `json:"pid"`         // the new process, serving now
	Generation  uint64 `json:"generation"`  // the new process's
	PreviousPID int    `json:"previousPid"` // this one, draining
	// Handed over: the inFlightConn counts the new process took.
	Limiters    int64 `json:"limiters"`
	Keys        int64 `json:"keys"`
	Connections int64 `json:"connections"`
	// Unrouted: connections not yet routed, moved to the new process with
	// their sockets.
	Unrouted int64 `json:"unrouted"`
}

// ErrBusy: an upgrade is already under way, this process has handed over,
// or the generation before it is still draining (a third would be alive).
var ErrBusy = errors.New("upgrade refused")
