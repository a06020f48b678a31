package proxy

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A loop's io_uring (ARCHITECTURE.md, "The connection core"). A system call
// costs about 1.2 µs of CPU on its own on the hosts measured here, more than
// the work of an epoll_ctl or a close, and a proxied connection made about
// seventeen of them. Five of those are calls whose results the loop does not
// wait for: adding the two sockets to its epoll set, the backend's
// TCP_NODELAY, the two closes. With a ring, a loop queues them and the kernel
// makes them inside the one system call that also takes the loop's next
// events (IORING_OP_EPOLL_WAIT, Linux 6.15), so a busy loop pays one call per
// batch of events however many connections the batch opened and ended.
//
// The ring is used only where every operation it needs works, checked when the
// loop is made (newURing); else, or with TOLLGATE_IO_URING=off, the loop makes
// the same calls directly, as before. Container runtimes' default seccomp
// profiles (Docker's since 25.0, containerd's) refuse io_uring: there the
// loops fall back, saying so in a debug line.
//
// Only operations the kernel makes inline, within the call that submits
// them, are queued. One it hands to an io-wq worker thread instead looks its
// descriptor up by number when the worker gets to it: after a close queued
// behind it has freed the number and the next accept4 or socket has taken
// it, it would act on another connection's socket. IORING_OP_SHUTDOWN is
// always handed to a worker (measured: an iou-wrk thread appears at the
// first), so shutdowns stay direct calls; they shut down the next client's
// socket 1-3 times per 3 s of a connection flood before they did
// (bench/README.md). An epoll_ctl goes to a worker when the epoll set's mutex
// is taken, which another thread does only while the set is registered in
// Go's poller (loop.waitInPoller): then watches are direct calls too.
//
// Invariants the loop keeps:
//
//   - Only the loop's goroutine touches the ring.
//   - Once an operation on a socket is queued, every later one that frees or
//     reuses its number is queued too, or the ring is flushed first (flush): a
//     descriptor closed directly while a queued operation names it could be
//     reused by the next accept4, and the operation would apply to the new
//     socket. Queued operations never block, so the kernel makes them in
//     order, each completing within the call that submits it.
//   - Successful queued operations post no completion (IOSQE_CQE_SKIP_SUCCESS);
//     a failed one does, and only a failed epoll_ctl matters: its connection
//     ends (loop.unwatched).
//   - At most one IORING_OP_EPOLL_WAIT is in flight; it writes into
//     loop.events, which the loop reads only after reaping its completion.

// The kernel's io_uring ABI (include/uapi/linux/io_uring.h).
const (
	iouOpAsyncCancel = 14
	iouOpClose       = 19
	iouOpEpollCtl    = 29
	iouOpURingCmd    = 46
	iouOpEpollWait   = 59

	iosqeCQESkipSuccess = 1 << 6

	iouSetupSubmitAll   = 1 << 7
	iouSetupCoopTaskrun = 1 << 8

	iouEnterGetEvents = 1 << 0
	iouEnterExtArg    = 1 << 3

	iouRegisterProbe      = 8
	iouProbeOpSupported   = 1
	iouSocketOpSetsockopt = 3

	iouOffSQRing = 0
	iouOffCQRing = 0x8000000
	iouOffSQEs   = 0x10000000
)

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// uringSQE is struct io_uring_sqe (64 bytes), with the unions named for the
// operations queued here: off is epoll_ctl's target descriptor or a uring
// command's cmd_op; addr the epoll_event's or a cancel's target, or a
// setsockopt's level and optname; len epoll_ctl's op or epoll_wait's
// maxevents; optlen and optval a setsockopt's.
type uringSQE struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32
	userData uint64
	bufIndex uint16
	pers     uint16
	optlen   uint32
	optval   uint64
	pad      uint64
}

// uringCQE is struct io_uring_cqe.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uringArg holds what a queued operation points the kernel at, one per
// submission slot: read when the call that submits it runs, never later
// (queued operations complete within it).
type uringArg struct {
	ev     unix.EpollEvent
	v      int32
	linger unix.Linger
}

// uringGetEventsArg is struct io_uring_getevents_arg, for a wait's timeout.
type uringGetEventsArg struct {
	sigmask     uint64
	sigmaskSz   uint32
	minWaitUsec uint32
	ts          uint64
}

// User data of completions: the epoll wait, a cancel, and the operations
// whose failure is ignored; any other value is a failed epoll_ctl ADD's
// eventData (a connection's socket: tag 2 or 3, never 0).
const (
	udIgnore uint64 = 0
	udWait   uint64 = 1<<64 - 1
	udCancel uint64 = 1<<64 - 2
)

const uringEntries = 256

type uring struct {
	fd      int
	ringMem []byte
	sqeMem  []byte

	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []uringSQE
	args    []uringArg
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []uringCQE

	tail  uint32 // the next submission slot (published on enter)
	armed bool   // an IORING_OP_EPOLL_WAIT is in flight
	ops   uint64 // calls queued (not counting waits and cancels), for tests

	// failed is called with a failed epoll_ctl ADD's data and errno.
	failed func(data uint64, err syscall.Errno)

	waitArg uringGetEventsArg
	ts      unix.Timespec
}

// uringOff says TOLLGATE_IO_URING=off: the loops make every call directly
// (for measuring one way against the other, and for hosts where io_uring is
// unwanted).
var uringOff = os.Getenv("TOLLGATE_IO_URING") == "off"

// newURing makes a ring for the loop with epoll set epfd, whose eventfd
// wakefd is in that set with eventData(tagWake, 0, 0), and checks that every
// operation the loop queues works; else it returns the reason.
func newURing(epfd, wakefd int, events []unix.EpollEvent) (*uring, error) {
	if uringOff {
		return nil, errors.New("TOLLGATE_IO_URING=off")
	}
	r, err := setupURing(uringEntries)
	if err != nil {
		return nil, err
	}
	if err := r.check(epfd, wakefd, events); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func setupURing(entries uint32) (*uring, error) {
	var p uringParams
	p.flags = iouSetupSubmitAll | iouSetupCoopTaskrun
	fd, _, e := syscall.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &uring{fd: int(fd)}
	if p.features&1 == 0 { // IORING_FEAT_SINGLE_MMAP, Linux 5.4
		r.close()
		return nil, errors.New("io_uring without a single mapping for its rings")
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	mem, err := unix.Mmap(r.fd, iouOffSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("mapping io_uring's rings: %w", err)
	}
	r.ringMem = mem
	sqes, err := unix.Mmap(r.fd, iouOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("mapping io_uring's submission entries: %w", err)
	}
	r.sqeMem = sqes
	b := unsafe.Pointer(&mem[0])
	r.sqHead = (*uint32)(unsafe.Add(b, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(b, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(b, p.sqOff.ringMask))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Add(b, p.sqOff.array)), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&sqes[0])), p.sqEntries)
	r.args = make([]uringArg, p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Add(b, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(b, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(b, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Add(b, p.cqOff.cqes)), p.cqEntries)
	r.tail = *r.sqTail
	return r, nil
}

// check makes sure the kernel has every operation the loop queues, and that
// the two it can only tell by trying (an epoll wait, a socket option through
// a uring command) do what they should.
func (r *uring) check(epfd, wakefd int, events []unix.EpollEvent) error {
	var probe struct {
		lastOp, opsLen uint8
		resv           uint16
		resv2          [3]uint32
		ops            [256]struct {
			op, resv uint8
			flags    uint16
			resv2    uint32
		}
	}
	if _, _, e := syscall.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouRegisterProbe, uintptr(unsafe.Pointer(&probe)), 256, 0, 0); e != 0 {
		return fmt.Errorf("io_uring probe: %w", e)
	}
	for _, op := range []uint8{iouOpAsyncCancel, iouOpClose, iouOpEpollCtl, iouOpURingCmd, iouOpEpollWait} {
		if op > probe.lastOp || probe.ops[op].flags&iouProbeOpSupported == 0 {
			return fmt.Errorf("io_uring without operation %d (IORING_OP_EPOLL_WAIT needs Linux 6.15)", op)
		}
	}

	// A socket option set through the ring, read back directly.
	s, err := sysSocket(unix.AF_INET)
	if err != nil {
		return err
	}
	defer sysClose(s)
	sqe := r.setsockopt(s, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	sqe.flags, sqe.userData = 0, 1 // a completion either way
	if err := r.submitOne(); err != nil {
		return fmt.Errorf("io_uring setsockopt: %w", err)
	}
	if v, err := unix.GetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_NODELAY); err != nil || v == 0 {
		return errors.New("io_uring setsockopt did not set TCP_NODELAY")
	}

	// An epoll wait through the ring that finds the loop's eventfd readable.
	var one = [8]byte{1}
	if _, err := unix.Write(wakefd, one[:]); err != nil {
		return err
	}
	defer func() {
		var b [8]byte
		_, _ = unix.Read(wakefd, b[:])
	}()
	r.queueWait(epfd, events)
	r.sqes[(r.tail-1)&r.sqMask].userData = 1
	r.armed = false
	if err := r.submitOne(); err != nil {
		return fmt.Errorf("io_uring epoll wait: %w", err)
	}
	if eventDataOf(&events[0]) != eventData(tagWake, 0, 0) {
		return errors.New("io_uring epoll wait returned another event than the one ready")
	}
	return nil
}

// submitOne submits what is queued and waits for one completion, which must
// be a success (the checks at setup).
func (r *uring) submitOne() error {
	if _, err := r.enter(1, iouEnterGetEvents, nil, true); err != nil {
		return err
	}
	h, t := *r.cqHead, atomic.LoadUint32(r.cqTail)
	if h == t {
		return errors.New("no completion")
	}
	c := r.cqes[h&r.cqMask]
	atomic.StoreUint32(r.cqHead, h+1)
	if c.res < 0 {
		return syscall.Errno(-c.res)
	}
	if c.res == 0 && c.userData == 1 && r.sqes[(r.tail-1)&r.sqMask].opcode == iouOpEpollWait {
		return errors.New("epoll wait found nothing")
	}
	return nil
}

func (r *uring) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.ringMem != nil {
		_ = unix.Munmap(r.ringMem)
	}
	_ = unix.Close(r.fd)
}

// next returns the next submission entry, zeroed, and its argument slot;
// with every slot queued, it submits them first.
func (r *uring) next() (*uringSQE, *uringArg) {
	if r.pending() == uint32(len(r.sqes)) {
		r.flush()
	}
	i := r.tail & r.sqMask
	r.sqArray[i] = i
	r.tail++
	sqe := &r.sqes[i]
	*sqe = uringSQE{flags: iosqeCQESkipSuccess}
	return sqe, &r.args[i]
}

func (r *uring) closeFD(fd int) {
	sqe, _ := r.next()
	r.ops++
	sqe.opcode, sqe.fd = iouOpClose, int32(fd)
}

// watch queues an epoll_ctl ADD of fd to epfd; a failure's completion
// carries data.
func (r *uring) watch(epfd, fd int, events uint32, data uint64) {
	sqe, a := r.next()
	r.ops++
	a.ev = unix.EpollEvent{Events: events}
	setEventData(&a.ev, data)
	sqe.opcode, sqe.fd, sqe.off, sqe.len = iouOpEpollCtl, int32(epfd), uint64(fd), unix.EPOLL_CTL_ADD
	sqe.addr = uint64(uintptr(unsafe.Pointer(&a.ev)))
	sqe.userData = data
}

func (r *uring) setsockopt(fd, level, opt, v int) *uringSQE {
	sqe, a := r.next()
	a.v = int32(v)
	r.sockopt(sqe, fd, level, opt, unsafe.Pointer(&a.v), 4)
	return sqe
}

// resetOnClose queues SO_LINGER 0: the socket's close, queued after it,
// sends a reset.
func (r *uring) resetOnClose(fd int) {
	sqe, a := r.next()
	a.linger = unix.Linger{Onoff: 1, Linger: 0}
	r.sockopt(sqe, fd, unix.SOL_SOCKET, unix.SO_LINGER, unsafe.Pointer(&a.linger), uint32(unsafe.Sizeof(a.linger)))
}

func (r *uring) sockopt(sqe *uringSQE, fd, level, opt int, val unsafe.Pointer, size uint32) {
	r.ops++
	sqe.opcode, sqe.fd = iouOpURingCmd, int32(fd)
	sqe.off = iouSocketOpSetsockopt // cmd_op
	sqe.addr = uint64(uint32(level)) | uint64(uint32(opt))<<32
	sqe.optlen, sqe.optval = size, uint64(uintptr(val))
}

// queueWait queues an epoll wait on epfd into events.
func (r *uring) queueWait(epfd int, events []unix.EpollEvent) {
	sqe, _ := r.next()
	sqe.flags = 0
	sqe.opcode, sqe.fd = iouOpEpollWait, int32(epfd)
	sqe.addr, sqe.len = uint64(uintptr(unsafe.Pointer(&events[0]))), uint32(len(events))
	sqe.userData = udWait
	r.armed = true
}

// pending is how many queued entries the kernel has not taken yet.
func (r *uring) pending() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// enter is io_uring_enter: it submits what is queued and, with want > 0,
// waits for that many completions (until timeout when one is given). A call
// that may block goes through the scheduler (blocking); one that cannot is
// raw. With entries submitted, the kernel reports their count, not the
// wait's timeout or interruption.
func (r *uring) enter(want uint32, flags uintptr, timeout *time.Duration, blocking bool) (int, error) {
	atomic.StoreUint32(r.sqTail, r.tail)
	n := r.pending()
	var arg unsafe.Pointer
	var argSize uintptr
	if timeout != nil {
		r.ts = unix.NsecToTimespec(int64(*timeout))
		r.waitArg = uringGetEventsArg{ts: uint64(uintptr(unsafe.Pointer(&r.ts)))}
		arg, argSize = unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg)
		flags |= iouEnterExtArg
	}
	var got uintptr
	var e syscall.Errno
	if blocking {
		got, _, e = syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(want), flags, uintptr(arg), argSize)
	} else {
		got, _, e = syscall.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(want), flags, uintptr(arg), argSize)
	}
	if e != 0 {
		return 0, e
	}
	return int(got), nil
}

// reap takes the completions there are: the epoll wait's (done: it
// completed, with n events, or err) and failed operations' (r.failed).
func (r *uring) reap() (n int, done bool, err error) {
	h, t := *r.cqHead, atomic.LoadUint32(r.cqTail)
	for ; h != t; h++ {
		c := &r.cqes[h&r.cqMask]
		switch c.userData {
		case udWait:
			r.armed, done = false, true
			if c.res >= 0 {
				n = int(c.res)
			} else if e := syscall.Errno(-c.res); e != unix.ECANCELED && e != unix.EINTR {
				err = e
			}
		case udIgnore, udCancel:
		default:
			if c.res < 0 && r.failed != nil {
				r.failed(c.userData, syscall.Errno(-c.res))
			}
		}
	}
	atomic.StoreUint32(r.cqHead, h)
	return n, done, err
}

// flush submits what is queued, without waiting.
func (r *uring) flush() {
	for tries := 0; r.pending() > 0; tries++ {
		_, err := r.enter(0, 0, nil, false)
		if err == nil || err == unix.EINTR {
			continue
		}
		// EBUSY or EAGAIN: completions the kernel could not post yet, or
		// no memory for now. Not expected (queued operations post a
		// completion only when they fail): take the completions there are,
		// then wait for one.
		r.reap()
		if tries >= 3 {
			_, _ = r.enter(1, iouEnterGetEvents, nil, true)
		}
	}
}

// disarm ends the epoll wait in flight, if one is: cancelled, or completed
// first, with n events in the loop's buffer.
func (r *uring) disarm() (n int, err error) {
	if !r.armed {
		return 0, nil
	}
	sqe, _ := r.next()
	sqe.opcode, sqe.addr, sqe.userData = iouOpAsyncCancel, udWait, udCancel
	for {
		_, eerr := r.enter(1, iouEnterGetEvents, nil, true)
		n, done, err := r.reap()
		if done {
			return n, err
		}
		if eerr != nil && eerr != unix.EINTR {
			return 0, eerr
		}
	}
}
