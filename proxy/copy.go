package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// pair is one proxied connection: the client and the backend socket, copied
// in both directions by two goroutines started fresh after the dial (a
// goroutine whose stack the dial grew would keep that stack while idle).
type pair struct {
	c       *tcp.Conn
	backend *net.TCPConn
	delay   time.Duration // termination delay; negative waits without limit
	up, dn  int64         // bytes client->backend, backend->client
	ended   atomic.Int32
	failed  atomic.Bool
	onEnd   func(p *pair) // optional, e.g. access log; nil on the fast path
}

func (p *pair) start() {
	go p.copyUp()
	go p.copyDown()
}

func (p *pair) copyUp()   { p.up = p.copy(p.backend, p.c.TCP) }
func (p *pair) copyDown() { p.dn = p.copy(p.c.TCP, p.backend) }

// copy moves bytes from src to dst until EOF or error. io.Copy between two
// *net.TCPConn splices on Linux. On EOF it half-closes dst, so the peer sees
// the end, and bounds the opposite direction by the termination delay. On an
// error both sockets are closed at once. The second copier to finish closes
// both sockets and finishes the connection.
func (p *pair) copy(dst, src *net.TCPConn) int64 {
	n, err := copyTCP(dst, src)
	if err != nil || p.failed.Load() {
		p.failed.Store(true)
		_ = p.c.TCP.Close()
		_ = p.backend.Close()
	} else {
		_ = dst.CloseWrite()
		if p.delay >= 0 {
			_ = dst.SetReadDeadline(time.Now().Add(p.delay))
		}
	}
	if p.ended.Add(1) == 2 {
		_ = p.c.TCP.Close()
		_ = p.backend.Close()
		if p.onEnd != nil {
			p.onEnd(p)
		}
		p.c.Finish()
	}
	return n
}

// copyTCP copies src to dst until EOF, splicing in the kernel.
//
// io.Copy between two *net.TCPConn splices too, but holds a pipe (two file
// descriptors) for the whole life of the connection, idle or not. Here the
// copier parks on the netpoller until src is readable, holding nothing, then
// splices exactly the bytes queued in the socket through a pooled pipe that
// goes back to the pool at once. Idle connections cost a parked goroutine and
// no pipe.
func copyTCP(dst, src *net.TCPConn) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	var (
		total int64
		avail int
		rerr  error
		lr    = io.LimitedReader{R: src}
	)
	wait := func(fd uintptr) bool {
		avail, rerr = readable(int(fd))
		return rerr != syscall.EAGAIN
	}
	for {
		if err := rc.Read(wait); err != nil {
			return total, err
		}
		if rerr != nil {
			return total, rerr
		}
		if avail == 0 {
			return total, nil // EOF
		}
		lr.N = int64(avail)
		n, err := dst.ReadFrom(&lr)
		total += n
		if err != nil {
			return total, err
		}
	}
}

// readable reports how many bytes are queued on a non-blocking socket: 0 at
// EOF, syscall.EAGAIN when there is nothing yet.
func readable(fd int) (int, error) {
	var b [1]byte
	n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if n == 0 {
		return 0, nil
	}
	q, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil || q < 1 {
		return 1, nil //nolint:nilerr // at least the peeked byte is there
	}
	return q, nil
}
