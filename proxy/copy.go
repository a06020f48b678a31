package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"time"

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

// copyTCP copies src to dst; io.Copy takes the splice path for TCP to TCP.
func copyTCP(dst, src *net.TCPConn) (int64, error) {
	return io.Copy(dst, src)
}
