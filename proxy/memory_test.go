package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// TestManyClientsLeaveNoState: 100,000 short connections, each from its own
// source IP in 127.0.0.0/8, through the proxy and an inFlightConn limiter.
// Afterwards the limiter holds no entry: nothing per IP outlives its last
// connection. (10,000 under -race.)
func TestManyClientsLeaveNoState(t *testing.T) {
	n := 100_000
	if raceEnabled || testing.Short() {
		n = 10_000
	}
	itest.ConntrackRoom(t, 2*n) // a client and a backend connection each
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), map[string]*config.TCPMiddleware{"l": limitMW(1)}, "l"))
	addr := s.addr("tcp")
	l := limiterOf(s, "l@file")

	var next, ok, failed atomic.Int64
	var mu sync.Mutex
	var firstErrs []error
	deadline := time.Now().Add(3 * time.Minute)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				// 127.1.0.0 + i: every connection has a source IP of its own.
				v := uint32(0x7f010000) + uint32(i)
				src := net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err == nil {
					_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // generous: -race on a busy machine
					err = echoErr(c)
					_ = c.Close()
				}
				if err != nil {
					if failed.Add(1) <= 5 {
						mu.Lock()
						firstErrs = append(firstErrs, fmt.Errorf("%s: %w", src, err))
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := ok.Load(); got != int64(n) {
		t.Fatalf("%d of %d connections forwarded (%d failed): each came from a fresh IP with amount 1; first failures: %v", got, n, failed.Load(), errors.Join(firstErrs...))
	}
	waitFor(t, "the limiter to drain", func() bool { return l.Stats().InFlight == 0 })
	if e := l.Entries(); e != 0 {
		t.Fatalf("limiter holds %d per-IP entries after %d clients left, want 0", e, n)
	}
	st := l.Stats()
	if st.Admitted != uint64(n) || st.DistinctIPs != 0 {
		t.Fatalf("stats %+v after %d clients", st, n)
	}
	t.Logf("%d clients, %d admitted, 0 entries left", n, st.Admitted)
}

// echoErr writes one byte and reads it back (within c's deadline).
func echoErr(c net.Conn) error {
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if b[0] != 'x' {
		return fmt.Errorf("echoed %q", b[0])
	}
	return nil
}
