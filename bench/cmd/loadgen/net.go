package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (Linux 4.2+). With it,
// binding a source address leaves the port to connect(), which picks one
// unique for the 4-tuple. Without it every bind(ip, 0) needs a port free
// for that address on any destination, and a few seconds of connection
// cycles run each source address out of ephemeral ports.
const ipBindAddressNoPort = 24

// newDialer returns a dialer whose connections come from src.
func newDialer(src netip.Addr, timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout:   timeout,
		LocalAddr: &net.TCPAddr{IP: src.AsSlice()},
		KeepAlive: -1,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
}

func dialers(ips []netip.Addr, timeout time.Duration) []*net.Dialer {
	d := make([]*net.Dialer, len(ips))
	for i, ip := range ips {
		d[i] = newDialer(ip, timeout)
	}
	return d
}

// ipRange returns n consecutive IPv4 addresses from base, skipping those
// ending in .0 and .255. It refuses to leave 127.0.0.0/8, so no scenario
// can send a packet off the machine.
func ipRange(base string, n int) ([]netip.Addr, error) {
	a, err := netip.ParseAddr(base)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("ip base %q: want an IPv4 address", base)
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	out := make([]netip.Addr, 0, n)
	for len(out) < n {
		if v>>24 != 127 {
			return nil, fmt.Errorf("%d addresses from %s leave 127.0.0.0/8", n, base)
		}
		if last := v & 0xff; last != 0 && last != 255 {
			out = append(out, netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
		}
		v++
	}
	return out, nil
}

// Outcome is the result of one admission probe.
type Outcome int

const (
	Admitted   Outcome = iota // the 1-byte ping came back: the proxy forwarded the connection
	Rejected                  // closed or reset by the proxy (possibly during connect)
	Pending                   // neither echoed nor closed within the timeout
	DialFailed                // connect itself failed (timeout, EADDRNOTAVAIL, EMFILE, ...)
)

func (o Outcome) String() string {
	return [...]string{"admitted", "rejected", "pending", "dial_failed"}[o]
}

// probe connects, sends one byte and waits for its echo. An admitted
// connection is returned open with no deadline; any other is closed.
func probe(d *net.Dialer, target string, timeout time.Duration) (*net.TCPConn, Outcome, error) {
	c, o, err := probeConn(d, target, timeout, nil)
	if c == nil {
		return nil, o, err
	}
	return c.(*net.TCPConn), o, err
}

// probeTLS is probe through a full TLS handshake with cfg: the byte is
// echoed through the terminated connection. A handshake refused (a reset,
// a close) is Rejected; one that does not complete in time is Pending.
func probeTLS(d *net.Dialer, target string, timeout time.Duration, cfg *tls.Config) (net.Conn, Outcome, error) {
	return probeConn(d, target, timeout, cfg)
}

func probeConn(d *net.Dialer, target string, timeout time.Duration, cfg *tls.Config) (net.Conn, Outcome, error) {
	nc, err := d.Dial("tcp", target)
	if err != nil {
		// A proxy that resets at once can do so before connect() returns.
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, Rejected, err
		}
		return nil, DialFailed, err
	}
	c := nc
	nc.SetDeadline(time.Now().Add(timeout))
	if cfg != nil {
		tc := tls.Client(nc, cfg)
		if err := tc.Handshake(); err != nil {
			nc.Close()
			if isTimeout(err) {
				return nil, Pending, err
			}
			return nil, Rejected, err
		}
		c = tc
	}
	b := [1]byte{'p'}
	if _, err := c.Write(b[:]); err != nil {
		c.Close()
		return nil, Rejected, err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		if isTimeout(err) {
			return nil, Pending, err
		}
		return nil, Rejected, err
	}
	nc.SetDeadline(time.Time{})
	return c, Admitted, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// errClass buckets an error for a scenario's error histogram.
func errClass(stage string, err error) string {
	switch {
	case err == nil:
		return ""
	case isTimeout(err):
		return stage + "_timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return stage + "_eof"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return stage + "_reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return stage + "_refused"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return stage + "_addrnotavail"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return stage + "_fdlimit"
	default:
		return stage + "_other"
	}
}

// localExhaustion reports error classes that are the client's own resource
// limits; a worker backs off on them instead of spinning.
func localExhaustion(cls string) bool {
	return cls == "dial_addrnotavail" || cls == "dial_fdlimit"
}

// closeAll closes every connection of cs that is not nil (a slot left
// empty).
func closeAll[C interface {
	comparable
	io.Closer
}](cs []C) {
	var none C
	for _, c := range cs {
		if c != none {
			c.Close()
		}
	}
}
