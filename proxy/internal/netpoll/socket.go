package netpoll

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Client keepalive: a client that vanishes without a FIN or RST (a NAT that
// forgot it, a host that lost power) would hold its inFlightConn slot for
// ever. Probes after 30 s idle, every 15 s, 4 unanswered: freed within ~90 s.
const (
	KeepAliveIdle     = 30
	KeepAliveInterval = 15
	KeepAliveCount    = 4
)

// Listen binds a raw listening socket on addr ("[host]:port"; host an
// IP literal, "localhost", or empty for every address, dual-stack). The
// options accepted sockets inherit are set here once, so that accepting costs
// no setsockopt: keepalive (a client that vanishes frees its limiter slot)
// and TCP_NODELAY. Errors read as Go's: "listen tcp 127.0.0.1:5432: bind:
// address already in use".
func Listen(addr string, reusePort bool) (fd int, bound netip.AddrPort, wildcard bool, err error) {
	ip, port, err := ParseListenAddr(addr)
	if err != nil {
		return -1, bound, false, err
	}
	wildcard = !ip.IsValid() || ip.IsUnspecified()
	opErr := func(op string, e error) error {
		return &net.OpError{Op: "listen", Net: "tcp", Addr: &net.TCPAddr{IP: ip.AsSlice(), Port: int(port)}, Err: os.NewSyscallError(op, e)}
	}
	family := unix.AF_INET
	if !ip.IsValid() || ip.Is6() {
		family = unix.AF_INET6
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil && !ip.IsValid() { // no IPv6 here: every IPv4 address
		family = unix.AF_INET
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return -1, bound, false, opErr("socket", err)
	}
	fail := func(op string, e error) (int, netip.AddrPort, bool, error) {
		_ = unix.Close(fd)
		return -1, netip.AddrPort{}, false, opErr(op, e)
	}
	opts := append([][3]int{{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1}}, InheritedOpts...)
	if reusePort {
		opts = append(opts, [3]int{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1})
	}
	if family == unix.AF_INET6 {
		v6only := 1
		if !ip.IsValid() {
			v6only = 0 // every address, IPv4 too, as Go's net.Listen does
		}
		opts = append(opts, [3]int{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only})
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			return fail("setsockopt", err)
		}
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		a4 := ip.As4()
		if !ip.IsValid() {
			a4 = [4]byte{}
		}
		sa = &unix.SockaddrInet4{Port: int(port), Addr: a4}
	} else {
		sa = &unix.SockaddrInet6{Port: int(port), Addr: ip.As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(fd, listenBacklog()); err != nil {
		return fail("listen", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	return fd, SockaddrAP(got), wildcard, nil
}

// ParseListenAddr reads a listening address as Listen binds it:
// "[host]:port", host an IP literal (an IPv4-mapped IPv6 address is the IPv4
// one), "localhost" (127.0.0.1), or empty (the zero Addr: every address,
// dual-stack).
func ParseListenAddr(addr string) (netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, &net.AddrError{Err: "invalid port", Addr: addr}
	}
	var ip netip.Addr
	switch host = strings.Trim(host, "[]"); host {
	case "":
	case "localhost":
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	default:
		if ip, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}, 0, &net.AddrError{Err: "not an IP address", Addr: host}
		}
		ip = ip.Unmap()
	}
	return ip, uint16(port), nil
}

// ListenKey is what addr binds, as a string two addresses share when they
// bind the same socket: "localhost:5432", "127.0.0.1:05432" and
// "[::ffff:127.0.0.1]:5432" are all "127.0.0.1:5432", ":5432" stays ":5432"
// (dual-stack, not "0.0.0.0:5432"). An address Listen would refuse (a
// host name an admin listener may use) is its own key. An upgrade in place
// matches inherited sockets by it (upgrade.Match).
func ListenKey(addr string) string {
	ip, port, err := ParseListenAddr(addr)
	switch {
	case err != nil:
		return addr
	case !ip.IsValid():
		return ":" + strconv.Itoa(int(port))
	}
	return netip.AddrPortFrom(ip, port).String()
}

// InheritedOpts are the options a listening socket gives the sockets it
// accepts, set on it so that accepting costs no setsockopt.
var InheritedOpts = [][3]int{
	{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
	{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, KeepAliveIdle},
	{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, KeepAliveInterval},
	{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, KeepAliveCount},
	{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
}

// Inherited checks that fd is a listening TCP socket (IPv4 or IPv6),
// makes it non-blocking and close-on-exec, sets InheritedOpts on it (it may
// have been the old process's admin listener, which Go's net.Listen made
// without them), and returns its address and whether it is bound to every
// address.
func Inherited(fd int) (bound netip.AddrPort, wildcard bool, err error) {
	for _, c := range []struct {
		opt  int
		want []int
		what string
	}{
		{unix.SO_TYPE, []int{unix.SOCK_STREAM}, "not a stream socket"},
		{unix.SO_DOMAIN, []int{unix.AF_INET, unix.AF_INET6}, "not an IP socket"},
		{unix.SO_ACCEPTCONN, []int{1}, "not listening"},
	} {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, c.opt)
		if err != nil {
			return bound, false, os.NewSyscallError("getsockopt", err)
		}
		ok := false
		for _, w := range c.want {
			ok = ok || v == w
		}
		if !ok {
			return bound, false, errors.New(c.what)
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return bound, false, os.NewSyscallError("fcntl", err)
	}
	unix.CloseOnExec(fd)
	for _, o := range InheritedOpts {
		if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			return bound, false, os.NewSyscallError("setsockopt", err)
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return bound, false, os.NewSyscallError("getsockname", err)
	}
	bound = SockaddrAP(sa)
	return bound, bound.Addr().IsUnspecified(), nil
}

var (
	backlogOnce sync.Once
	backlog     int
)

// listenBacklog is the kernel's somaxconn, as Go's net.Listen uses.
func listenBacklog() int {
	backlogOnce.Do(func() {
		backlog = unix.SOMAXCONN
		if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				backlog = n
			}
		}
	})
	return backlog
}

func SockaddrAP(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// Accept accepts one connection from a non-blocking listener: a
// non-blocking, close-on-exec socket and the peer's address (unmapped),
// without allocating; a raw call, as the loops' others (sys.go).
func Accept(lfd int) (int, netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unsafe.Sizeof(rsa))
	r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, e
	}
	return int(r), rawAP(&rsa), nil
}

// rawAP decodes an AF_INET or AF_INET6 sockaddr (unmapped).
func rawAP(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), portOf(p.Port))
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr).Unmap(), portOf(p.Port))
	}
	return netip.AddrPort{}
}

// portOf converts a sockaddr port (network byte order in memory) to a number.
func portOf(p uint16) uint16 {
	var b [2]byte
	*(*uint16)(unsafe.Pointer(&b)) = p
	return binary.BigEndian.Uint16(b[:])
}

// LocalAddr asks the kernel for a socket's local address.
func LocalAddr(fd int) netip.AddrPort {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	return SockaddrAP(sa)
}

// Family is the socket family that reaches ap.
func Family(ap netip.AddrPort) int {
	if ap.Addr().Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// Connect starts a connect(2) of fd to ap (non-blocking: a raw call, as
// the loops' others, sys.go), the address built on the stack: no
// allocation, and nothing shared between loops.
func Connect(fd int, ap netip.AddrPort) error {
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ap.Port())
	a := ap.Addr().Unmap()
	var (
		p unsafe.Pointer
		n uintptr
	)
	var sa4 unix.RawSockaddrInet4
	var sa6 unix.RawSockaddrInet6
	if a.Is4() {
		sa4.Family = unix.AF_INET
		sa4.Port = *(*uint16)(unsafe.Pointer(&port))
		sa4.Addr = a.As4()
		p, n = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		sa6.Family = unix.AF_INET6
		sa6.Port = *(*uint16)(unsafe.Pointer(&port))
		sa6.Addr = a.As16()
		p, n = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(p), n)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// SocketError returns the error a failed non-blocking connect left.
func SocketError(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v == 0 {
		return errors.New("connection failed")
	}
	return unix.Errno(v)
}
