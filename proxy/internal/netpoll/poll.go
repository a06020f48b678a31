package netpoll

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetData stores d as the event's 64-bit user data (the kernel's
// epoll_data: Fd holds its low half, Pad its high half).
func SetData(ev *unix.EpollEvent, d uint64) {
	ev.Fd = int32(uint32(d))
	ev.Pad = int32(uint32(d >> 32))
}

func DataOf(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// PollNow returns the events ready now, without blocking: a raw system
// call, with none of the scheduler's bookkeeping for one that may block.
func PollNow(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Poller is an epoll set and the eventfd that wakes it from other
// goroutines. Its owner (one goroutine) calls every method but Wake.
type Poller struct {
	fd, wake int
}

// OpenPoller makes an epoll set with its eventfd in it, reported with
// wakeData.
func OpenPoller(wakeData uint64) (Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return Poller{}, fmt.Errorf("epoll_create1: %w", err)
	}
	wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return Poller{}, fmt.Errorf("eventfd: %w", err)
	}
	p := Poller{fd: epfd, wake: wfd}
	if err := p.Ctl(unix.EPOLL_CTL_ADD, wfd, unix.EPOLLIN, wakeData); err != nil {
		p.Close()
		return Poller{}, err
	}
	return p, nil
}

// Ctl adds, modifies or deletes fd's registration, with events and the
// user data the events carry back.
func (p *Poller) Ctl(op, fd int, events uint32, data uint64) error {
	ev := unix.EpollEvent{Events: events}
	SetData(&ev, data)
	if err := EpollCtl(p.fd, op, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// Remove takes fd out of the set.
func (p *Poller) Remove(fd int) { _ = unix.EpollCtl(p.fd, unix.EPOLL_CTL_DEL, fd, nil) }

// Wait blocks until events are ready or timeout (milliseconds; -1 for
// none) passes: the one call of the set the scheduler knows may block.
func (p *Poller) Wait(events []unix.EpollEvent, timeout int) (int, error) {
	return unix.EpollWait(p.fd, events, timeout)
}

// Now returns the events ready now, without blocking (PollNow).
func (p *Poller) Now(events []unix.EpollEvent) (int, error) { return PollNow(p.fd, events) }

// Wake makes the owner's next (or current) wait return with the eventfd's
// event. It never blocks; any goroutine may call it.
func (p *Poller) Wake() {
	var one = [8]byte{1}
	_, _ = unix.Write(p.wake, one[:])
}

// Woken resets the eventfd after its event.
func (p *Poller) Woken() {
	var b [8]byte
	_, _ = unix.Read(p.wake, b[:])
}

// Dup returns a duplicate of the set's descriptor in Go's poller, readable
// when the set has events: a way to wait for them without holding a P.
func (p *Poller) Dup() (*os.File, syscall.RawConn, error) {
	fd, err := unix.FcntlInt(uintptr(p.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	// O_NONBLOCK is the open file's, shared with the set: epoll_wait does
	// not look at it, and os.NewFile needs it to use the poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, raw, nil
}

// Close closes the set and its eventfd.
func (p *Poller) Close() {
	_ = unix.Close(p.fd)
	_ = unix.Close(p.wake)
}
