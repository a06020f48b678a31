package netpoll

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An idle direction of a goroutine-served connection holds no goroutine
// (ARCHITECTURE.md, "The connection core"): when no bytes came for a while,
// its socket is watched in the idle waiter's epoll set, one-shot, and the
// goroutine ends; once bytes arrive (or the connection is closed) a new
// goroutine resumes the copy (package proxy's copy of such a connection). One waiter serves the
// process: a goroutine blocked in epoll_wait, which holds a thread and no P.

// IdleWaiter runs a function on a new goroutine once a socket is readable.
type IdleWaiter struct {
	epfd int

	mu    sync.Mutex
	next  uint64
	waits map[uint64]func()
}

var (
	idleOnce sync.Once
	idleW    *IdleWaiter
	idleErr  error
)

// Idle is the process's idle waiter, started on first use.
func Idle() (*IdleWaiter, error) {
	idleOnce.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			idleErr = os.NewSyscallError("epoll_create1", err)
			return
		}
		idleW = &IdleWaiter{epfd: fd, waits: map[uint64]func(){}}
		go idleW.run()
	})
	return idleW, idleErr
}

func (w *IdleWaiter) run() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1) // blocks its thread, not a P
		if err != nil {
			if !errors.Is(err, unix.EINTR) {
				time.Sleep(10 * time.Millisecond) // not expected; never spin
			}
			continue
		}
		for i := range n {
			w.Fire(DataOf(&events[i]))
		}
	}
}

// Add files run under a new id, for Watch to arm or Fire to start.
func (w *IdleWaiter) Add(run func()) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.waits[w.next] = run
	return w.next
}

// Fire starts id's function on a new goroutine, unless it already started:
// from the socket's event, or early, when the connection is closed.
func (w *IdleWaiter) Fire(id uint64) {
	w.mu.Lock()
	run := w.waits[id]
	delete(w.waits, id)
	w.mu.Unlock()
	if run != nil {
		go run()
	}
}

// Take removes id's function unless it already started, and reports whether
// it removed it.
func (w *IdleWaiter) Take(id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.waits[id]
	delete(w.waits, id)
	return ok
}

// Watch arms rc's socket, one-shot, to fire id when it is readable or its
// peer ended. The descriptor is used under rc's reference, so a socket
// closed meanwhile fails here instead of arming another that took its number.
func (w *IdleWaiter) Watch(rc syscall.RawConn, id uint64) error {
	var cerr error
	err := rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT}
		SetData(&ev, id)
		// Armed before, the socket is still in the set, disabled.
		cerr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
		if errors.Is(cerr, unix.ENOENT) {
			cerr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if err != nil {
		return err
	}
	if cerr != nil {
		return os.NewSyscallError("epoll_ctl", cerr)
	}
	return nil
}

// Filed is the number of functions filed and not started: the directions
// waiting for bytes without a goroutine.
func (w *IdleWaiter) Filed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits)
}
