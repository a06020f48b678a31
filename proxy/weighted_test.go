package proxy

import (
	"sync/atomic"
	"testing"

	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// fakeService counts the connections it is given and says whether it is up.
type fakeService struct {
	up bool
	n  int
}

func (f *fakeService) ServeTCP(*tcp.Conn) { f.n++ }
func (f *fakeService) available() bool    { return f.up }

func TestWeightedSkipsMembersWithNoServerUp(t *testing.T) {
	a, b, c := &fakeService{up: true}, &fakeService{up: false}, &fakeService{up: true}
	w := &weighted{children: []weightedChild{{h: a, weight: 1}, {h: b, weight: 2}, {h: c, weight: 1}}, total: 4}
	for range 8 {
		w.ServeTCP(&tcp.Conn{})
	}
	if a.n != 4 || b.n != 0 || c.n != 4 {
		t.Fatalf("with b down: a=%d b=%d c=%d, want 4/0/4", a.n, b.n, c.n)
	}
	b.up = true
	a.n, c.n = 0, 0
	for range 16 {
		w.ServeTCP(&tcp.Conn{})
	}
	if a.n != 4 || b.n != 8 || c.n != 4 {
		t.Fatalf("with b back: a=%d b=%d c=%d, want 4/8/4", a.n, b.n, c.n)
	}
	if !w.available() {
		t.Fatal("weighted with members up reports unavailable")
	}
	a.up, b.up, c.up = false, false, false
	if w.available() {
		t.Fatal("weighted with every member down reports available")
	}
}

func TestLoadBalancerAvailability(t *testing.T) {
	up, down := new(atomic.Bool), new(atomic.Bool)
	up.Store(true)
	if lb := (&loadBalancer{servers: []server{{up: down}, {up: up}}}); !lb.available() {
		t.Fatal("one server up: unavailable")
	}
	if lb := (&loadBalancer{servers: []server{{up: down}}}); lb.available() {
		t.Fatal("every server down: available")
	}
	if lb := (&loadBalancer{}); lb.available() {
		t.Fatal("no servers: available")
	}
}
