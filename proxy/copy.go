package proxy

import (
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// pair is one proxied connection: the client and the backend socket, copied
// in both directions by two goroutines started fresh after the dial (a
// goroutine whose stack the dial grew would keep that stack while idle).
type pair struct {
	c        *tcp.Conn
	backend  *net.TCPConn
	counters *ServiceCounters // the service's; counts copies done without splice
	delay    time.Duration    // termination delay; negative waits without limit
	up, dn   int64            // bytes client->backend, backend->client
	ended    atomic.Int32
	failed   atomic.Bool
	onEnd    func(p *pair) // optional, e.g. access log; nil on the fast path
}

func (p *pair) start() {
	go p.copyUp()
	go p.copyDown()
}

func (p *pair) copyUp()   { p.copy(p.backend, p.c.TCP, &p.up) }
func (p *pair) copyDown() { p.copy(p.c.TCP, p.backend, &p.dn) }

// fallbacks is where copyTCP counts wake-ups copied without a pipe.
func (p *pair) fallbacks() *atomic.Uint64 {
	if p.counters == nil {
		return nil
	}
	return &p.counters.SpliceFallbacks
}

// copy moves bytes from src to dst until EOF or error and stores the count.
// The first direction to reach EOF half-closes its dst, so the peer sees the
// end, and bounds the opposite direction by the termination delay. On an
// error both sockets are closed at once. The second copier to finish closes
// both sockets and finishes the connection.
func (p *pair) copy(dst, src *net.TCPConn, count *int64) {
	n, err := copyTCP(dst, src, p.fallbacks())
	*count = n // published to the last copier by the Add below
	last := p.ended.Add(1) == 2
	switch {
	case err != nil || p.failed.Load():
		p.failed.Store(true)
		_ = p.c.TCP.Close()
		_ = p.backend.Close()
	case !last:
		// Pass the end on; the close below does it for the last direction.
		_ = dst.CloseWrite()
		if p.delay >= 0 {
			_ = dst.SetReadDeadline(time.Now().Add(p.delay))
		}
	}
	if last {
		_ = p.c.TCP.Close()
		_ = p.backend.Close()
		if p.onEnd != nil {
			p.onEnd(p)
		}
		p.c.Finish()
	}
}

// copyTCP copies src to dst until EOF, splicing in the kernel.
//
// io.Copy between two *net.TCPConn splices too, but holds a pipe (two file
// descriptors) for the whole life of the connection, idle or not. Here the
// copier parks on the netpoller holding nothing; when src is readable it
// takes a pipe from the pool, splices what is queued into it and on to dst,
// and puts the pipe back. The first splice doubles as the readiness probe, so
// a wake-up costs two splice calls, like io.Copy's, and idle connections hold
// no pipe.
//
// When no pipe can be created (the process is out of file descriptors), the
// wake-up reads into a pooled buffer and writes that instead, counted in
// fallbacks (when not nil): the connection goes on, a little slower, rather
// than ending.
func copyTCP(dst, src *net.TCPConn, fallbacks *atomic.Uint64) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	var (
		total int64
		p     *splicePipe
		buf   *[]byte // the fallback's buffer, while it holds data
		n     int
		serr  error
	)
	fill := func(fd uintptr) bool {
		if p == nil {
			if p = getPipe(); p == nil {
				if buf == nil {
					buf = copyBufs.Get().(*[]byte)
				}
				n, serr = readNB(int(fd), *buf)
				if serr == syscall.EAGAIN {
					copyBufs.Put(buf) // park without it
					buf = nil
					return false
				}
				return true
			}
		}
		n, serr = spliceNB(int(fd), p.w, maxSplice)
		if serr == syscall.EAGAIN {
			putPipe(p) // park without it
			p = nil
			return false
		}
		return true
	}
	var left int
	drain := func(fd uintptr) bool {
		for left > 0 {
			m, err := spliceNB(p.r, int(fd), left)
			if err == syscall.EAGAIN {
				return false // dst is full: wait until writable
			}
			if err != nil {
				serr = err
				return true
			}
			left -= m
		}
		return true
	}
	for {
		serr = nil
		if err := srcRC.Read(fill); err != nil {
			putPipe(p) // empty: fill only returns true after a splice
			putBuf(buf)
			return total, err
		}
		if serr != nil || n == 0 {
			putPipe(p)
			putBuf(buf)
			return total, serr // nil at EOF
		}
		if buf != nil { // no pipe: write what was read
			if fallbacks != nil {
				fallbacks.Add(1)
			}
			m, err := dst.Write((*buf)[:n])
			total += int64(m)
			putBuf(buf)
			buf = nil
			if err != nil {
				return total, err
			}
			continue
		}
		left = n
		if err := dstRC.Write(drain); err != nil {
			return total + int64(n-left), err // the pipe holds data: drop it
		}
		if serr != nil {
			return total + int64(n-left), serr
		}
		total += int64(n)
		putPipe(p)
		p = nil
	}
}

// maxSplice is the most one splice call moves: the pipe's size.
const maxSplice = 1 << 20

// splicePipe is a kernel pipe used as the splice buffer between two sockets.
type splicePipe struct{ r, w int }

var pipePool = sync.Pool{New: func() any { return newSplicePipe() }}

func newSplicePipe() any {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return (*splicePipe)(nil)
	}
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSplice)
	p := &splicePipe{r: fds[0], w: fds[1]}
	// A pipe dropped from the pool (or holding data after an error) is
	// closed when it becomes garbage.
	runtime.AddCleanup(p, func(fds [2]int) {
		_ = syscall.Close(fds[0])
		_ = syscall.Close(fds[1])
	}, fds)
	return p
}

func getPipe() *splicePipe { return pipePool.Get().(*splicePipe) }

// putPipe returns an empty pipe to the pool; nil is ignored.
func putPipe(p *splicePipe) {
	if p != nil {
		pipePool.Put(p)
	}
}

// copyBufs holds the buffers of copies done without a pipe.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func putBuf(b *[]byte) {
	if b != nil {
		copyBufs.Put(b)
	}
}

// readNB reads from a non-blocking descriptor.
func readNB(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, b)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0), err
	}
}

// spliceNB moves up to max bytes between two descriptors without blocking.
func spliceNB(from, to, max int) (int, error) {
	for {
		n, err := unix.Splice(from, nil, to, nil, max, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if err == syscall.EINTR {
			continue
		}
		return int(n), err
	}
}
