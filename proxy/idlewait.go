package proxy

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An idle direction of a goroutine-served connection holds no goroutine
// (ARCHITECTURE.md, "The connection core"): when no bytes came for
// idleAfter, its socket is watched in the idle waiter's epoll set, one-shot,
// and the goroutine ends; once bytes arrive (or the connection is closed) a
// new goroutine resumes the copy (goCopy.pump). One waiter serves the
// process: a goroutine blocked in epoll_wait, which holds a thread and no P.

// idleWaiter runs a function on a new goroutine once a socket is readable.
type idleWaiter struct {
	epfd int

	mu    sync.Mutex
	next  uint64
	waits map[uint64]func()
}

var (
	idleOnce sync.Once
	idleW    *idleWaiter
	idleErr  error
)

// theWaiter is the process's idle waiter, started on first use.
func theWaiter() (*idleWaiter, error) {
	idleOnce.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			idleErr = os.NewSyscallError("epoll_create1", err)
			return
		}
		idleW = &idleWaiter{epfd: fd, waits: map[uint64]func(){}}
		go idleW.run()
	})
	return idleW, idleErr
}

func (w *idleWaiter) run() {
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
			w.fire(eventDataOf(&events[i]))
		}
	}
}

// add files run under a new id, for watch to arm or fire to start.
func (w *idleWaiter) add(run func()) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.waits[w.next] = run
	return w.next
}

// fire starts id's function on a new goroutine, unless it already started:
// from the socket's event, or early, when the connection is closed.
func (w *idleWaiter) fire(id uint64) {
	w.mu.Lock()
	run := w.waits[id]
	delete(w.waits, id)
	w.mu.Unlock()
	if run != nil {
		go run()
	}
}

// take removes id's function unless it already started, and reports whether
// it removed it.
func (w *idleWaiter) take(id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.waits[id]
	delete(w.waits, id)
	return ok
}

// watch arms rc's socket, one-shot, to fire id when it is readable or its
// peer ended. The descriptor is used under rc's reference, so a socket
// closed meanwhile fails here instead of arming another that took its number.
func (w *idleWaiter) watch(rc syscall.RawConn, id uint64) error {
	var cerr error
	err := rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT}
		setEventData(&ev, id)
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
