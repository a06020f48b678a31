package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// capacityOf reads a service's live capacity from the API.
func capacityOf(t *testing.T, p *itest.Tollgate, service string) (open, queued int) {
	t.Helper()
	var rd struct {
		Services map[string]struct {
			Capacity *struct {
				Servers []struct {
					Open int `json:"open"`
				} `json:"servers"`
				Queued int `json:"queued"`
			} `json:"capacity"`
		} `json:"tcpServices"`
	}
	p.GetJSON(t, "/api/rawdata", &rd)
	c := rd.Services[service].Capacity
	if c == nil {
		return -1, -1
	}
	for _, s := range c.Servers {
		open += s.Open
	}
	return open, c.Queued
}

// Issue 17 acceptance, through the binary: a backend capped at 2 with a
// queue of 4: six clients, 2 served and 4 waiting, served in order as the
// served ones close; a 7th is closed at once; afterwards nothing is counted.
func TestServerCapQueueThroughTheBinary(t *testing.T) {
	greet := greetingServer(t)
	dyn := filepath.Join(t.TempDir(), "dyn.yml")
	if err := os.WriteFile(dyn, []byte(fmt.Sprintf(`tcp:
  routers:
    db:
      rule: "HostSNI(`+"`*`"+`)"
      service: db
      middlewares: [ten]
  middlewares:
    ten:
      inFlightConn:
        amount: 10
  services:
    db:
      loadBalancer:
        servers:
          - address: %q
            maxConn: 2
        queue:
          maxSize: 4
          timeout: 10s
`, greet)), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.db.address="+ep, "--providers.file.filename="+dyn)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["db@file"].Status == "enabled" }, "db@file not enabled")
	var conns []net.Conn
	defer func() { itest.CloseAll(conns) }()
	for i := 0; i < 6; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 5, byte(i+1))}}
		c, err := d.Dial("tcp", ep)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		itest.Eventually(t, 5*time.Second, func() bool { o, q := capacityOf(t, p, "db@file"); return o+q == i+1 }, "client %d not counted", i+1)
	}
	if o, q := capacityOf(t, p, "db@file"); o != 2 || q != 4 {
		t.Fatalf("open %d queued %d, want 2 and 4", o, q)
	}
	seventh, err := net.Dial("tcp", ep)
	if err == nil {
		_ = seventh.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := seventh.Read(make([]byte, 1)); err == nil {
			t.Fatal("a 7th connection beyond the queue was served")
		}
		seventh.Close()
	}
	served := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		b := make([]byte, 1)
		_, err := io.ReadFull(c, b)
		_ = c.SetReadDeadline(time.Time{})
		return err == nil && b[0] == 'G'
	}
	if !served(conns[0], 2*time.Second) || !served(conns[1], 2*time.Second) {
		t.Fatal("the first two were not served")
	}
	for next := 2; next < 6; next++ {
		conns[next-2].Close()
		if !served(conns[next], 3*time.Second) {
			t.Fatalf("client %d not served after a slot was freed", next+1)
		}
		if next+1 < 6 && served(conns[next+1], 30*time.Millisecond) {
			t.Fatalf("client %d served before its turn", next+2)
		}
	}
	itest.CloseAll(conns)
	conns = nil
	itest.Eventually(t, 5*time.Second, func() bool {
		o, q := capacityOf(t, p, "db@file")
		mw := p.Rawdata(t).Middlewares["ten@file"]
		return o == 0 && q == 0 && mw.InFlight != nil && mw.InFlight.InFlight == 0
	}, "capacity and limiter counts did not return to zero")
}

// greetingServer writes "G" to every connection and holds it until the
// client closes.
func greetingServer(t *testing.T) string {
	t.Helper()
	return itest.Listen(t, func(c net.Conn) {
		if _, err := c.Write([]byte("G")); err == nil {
			_, _ = io.Copy(io.Discard, c)
		}
	})
}

// Issue 17, the queue's timeout through the binary: with the one slot
// taken, a second client waits in the queue and is closed when
// queue.timeout has passed, not before, without being served; the counts
// return to the one connection still open.
func TestServerCapQueueTimeoutThroughTheBinary(t *testing.T) {
	greet := greetingServer(t)
	dyn := filepath.Join(t.TempDir(), "dyn.yml")
	if err := os.WriteFile(dyn, []byte(fmt.Sprintf(`tcp:
  routers:
    db:
      rule: "HostSNI(`+"`*`"+`)"
      service: db
  services:
    db:
      loadBalancer:
        servers:
          - address: %q
            maxConn: 1
        queue:
          maxSize: 2
          timeout: 400ms
`, greet)), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := itest.FreeAddr(t)
	p := itest.StartTollgate(t, "--entryPoints.db.address="+ep, "--providers.file.filename="+dyn)
	itest.Eventually(t, 5*time.Second, func() bool { return p.Rawdata(t).Routers["db@file"].Status == "enabled" }, "db@file not enabled")
	first, err := net.Dial("tcp", ep)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	b := make([]byte, 1)
	_ = first.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(first, b); err != nil || b[0] != 'G' {
		t.Fatalf("the first client was not served: %v", err)
	}
	start := time.Now()
	waiting, err := net.Dial("tcp", ep)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	_ = waiting.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := waiting.Read(b)
	took := time.Since(start)
	if n > 0 || err == nil {
		t.Fatalf("the queued client was served (%q) while the only slot was taken", b[:n])
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the queued client was still open 5 s after its 400ms queue timeout")
	}
	if took < 400*time.Millisecond {
		t.Fatalf("the queued client was closed after %v, before its 400ms queue timeout", took)
	}
	itest.Eventually(t, 5*time.Second, func() bool { o, q := capacityOf(t, p, "db@file"); return o == 1 && q == 0 }, "capacity did not return to the one open connection")
}
