package proxy

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/proxy/health"
	"github.com/tollgate-proxy/tollgate/proxy/internal/netpoll"
)

// An inherited descriptor that is not a listening TCP socket is refused with
// an error naming the entry point, never served.
func TestNewEntryPointFromRefusesWhatIsNotAListener(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	u, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(u)
	cfg := &config.EntryPoint{Address: "127.0.0.1:1"}
	for name, fd := range map[string]int{"pipe": p[0], "unbound TCP socket": s, "unix socket": u, "closed descriptor": 1 << 19} {
		if ep, err := NewEntryPointFrom("db", cfg, fd, zerolog.Nop()); err == nil || ep != nil {
			t.Errorf("%s: accepted as a listener", name)
		}
	}
}

// An entry point on an inherited listener serves the connections waiting
// in its queue; StopAccepting leaves them queued (not refused) and Resume
// serves them.
func TestInheritedListenerAndStopAccepting(t *testing.T) {
	be := startBackend(t, "")
	srvA, err := NewServer(map[string]*config.EntryPoint{"db": {Address: "127.0.0.1:0"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srvA.Shutdown(t.Context())
	addr, fd := srvA.EntryPoint("db").Listener()
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Fatal(err)
	}
	srvB, err := NewServer(map[string]*config.EntryPoint{"db": {Address: addr}}, Options{Inherited: map[string]Inherited{"db": {Name: "db", Address: addr, FD: dup}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srvB.Shutdown(t.Context())
	if !srvB.Uses("db") || srvB.EntryPoint("db").Addr().String() != srvA.EntryPoint("db").Addr().String() {
		t.Fatal("the entry point did not take over the inherited socket")
	}
	apply(srvB, "file", singleRouter(be.addr(), nil))
	srvB.Start()
	srvB.StopAccepting()
	ep := srvB.EntryPoint("db").Addr().String()
	c, err := net.DialTimeout("tcp", ep, time.Second) // queued: the handshake is the kernel's
	if err != nil {
		t.Fatalf("a connection was refused while nobody accepted: %v", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Fatalf("a stopped entry point served a connection: %v", err)
	}
	srvB.Resume()
	if !itest.Echoes(c) {
		t.Fatal("the queued connection was not served after Resume")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A seeded DOWN server (StateOptions.Health) starts DOWN (once), not UP.
func TestSeedHealth(t *testing.T) {
	dead := itest.FreeAddr(t) // nothing listens: the checks fail too
	st := NewState(zerolog.Nop(), StateOptions{Health: []HealthStatus{{Service: "s@file", Server: dead, Up: false}}})
	defer st.Close()
	spec := health.Spec{Interval: time.Hour, Timeout: 100 * time.Millisecond}
	ups := st.health.Acquire("s@file", spec, []string{dead}, zerolog.Nop(), nil)
	if ups[0].Load() {
		t.Fatal("a server handed over DOWN started UP")
	}
	if got := st.Health(); len(got) != 1 || got[0].Up || got[0].Server != dead {
		t.Fatalf("Health() = %+v", got)
	}
	st.health.Sweep()
	st.health.Sweep() // forgets the service
	ups = st.health.Acquire("s@file", health.Spec{Interval: time.Hour, Timeout: time.Second, Port: 1}, []string{dead}, zerolog.Nop(), nil)
	if !ups[0].Load() {
		t.Fatal("the seed was used twice")
	}
}

// A socket taken over from the old process's admin listener (made by Go's
// net.Listen, as an entry point that was internal there is) gets the
// options an entry point's sockets inherit: keepalive and TCP_NODELAY.
func TestInheritedListenerGetsTheAcceptedSocketsOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := NewEntryPointFrom("db", &config.EntryPoint{Address: ln.Addr().String()}, fd, zerolog.Nop())
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	defer ep.closeListener()
	for _, o := range netpoll.InheritedOpts {
		if v, err := unix.GetsockoptInt(fd, o[0], o[1]); err != nil || v != o[2] {
			t.Errorf("option %d/%d on the inherited listener: %d (%v), want %d", o[0], o[1], v, err, o[2])
		}
	}
}
