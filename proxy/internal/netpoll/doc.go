// Package netpoll is the proxy's layer over the kernel, with no knowledge
// of its event loops or connections (as gnet keeps pkg/netpoll and
// pkg/socket apart from its loop): an epoll set with the eventfd that wakes
// it (Poller, poll.go), the raw system calls a loop makes on non-blocking
// descriptors, without the scheduler's bookkeeping (sys.go), the sockets'
// own calls (socket.go: Listen and Inherited listeners with the options
// accepted sockets inherit, Accept, a non-blocking Connect, addresses and
// ListenKey), the kernel pipes splice moves bytes through (Pipe, pipe.go),
// and the process's IdleWaiter (idle.go), where an idle direction of a
// goroutine-served connection waits for bytes without a goroutine. Every
// call allocates nothing a connection would pay for; the loop, its timers
// and what a connection does with these calls are package proxy's
// (ARCHITECTURE.md, "The connection core").
package netpoll
