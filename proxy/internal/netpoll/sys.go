package netpoll

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls of a connection's life on an event loop. Every socket
// and pipe a loop touches is non-blocking, so none of these calls can
// block: they are made raw, without the scheduler's bookkeeping for a call
// that may (entersyscall and exitsyscall, with the wrappers about 1-2% of a
// loop's CPU per proxied connection and more per small round trip:
// bench/results/2026-12-02-0445-intel-xeon.md). A loop holds its P
// throughout, as it does while it runs; the one call that blocks, epoll_wait with a timeout, stays a
// scheduler-aware call (Poller.Wait).
//
// Each returns the kernel's errno as a unix.Errno (no allocation: Go boxes
// small integers without one), and retries on EINTR where that can happen.

func errnoOf(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Read reads from a non-blocking descriptor; n is 0 on an error.
func Read(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_READ, fd, b) }

// Write writes to a non-blocking descriptor; n is 0 on an error. A
// write to a socket its peer reset fails with EPIPE, and Go's runtime
// ignores the SIGPIPE it raises (on descriptors other than 1 and 2), as for
// unix.Write.
func Write(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, b) }

// rawIO is read(2) or write(2) of b on fd, retried on EINTR.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		r, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(b)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// Close closes a descriptor. Never retried: on Linux the descriptor is
// gone even when close reports EINTR.
func Close(fd int) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoOf(e)
}

// Peek reads up to len(b) bytes of fd's receive queue without taking
// them (MSG_PEEK), non-blocking; n is 0 at the peer's end, and on an error.
func Peek(fd int, b []byte) (int, error) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

func Shutdown(fd, how int) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
	return errnoOf(e)
}

// Socket opens a non-blocking, close-on-exec TCP socket of family.
func Socket(family int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func SetsockoptInt(fd, level, opt, v int) error {
	v32 := int32(v)
	_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v32)), 4, 0)
	return errnoOf(e)
}

// ResetOnClose makes the socket's close send a reset (SO_LINGER 0).
func ResetOnClose(fd int) error {
	l := unix.Linger{Onoff: 1, Linger: 0}
	_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
	return errnoOf(e)
}

func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoOf(e)
}

// Splice moves up to max bytes between two descriptors without blocking.
func Splice(from, to, max int) (int, error) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(from), 0, uintptr(to), 0, uintptr(max), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}
