package proxy

import (
	"os"
	"strings"
	"testing"
)

// Go's io.Copy between TCP connections holds a splice pipe (two descriptors)
// per direction for the life of the connection. The copier parks without
// one: 200 idle proxied connections must not hold 400 pipes.
func TestIdleConnectionsHoldNoPipe(t *testing.T) {
	be := startBackend(t, "")
	s := newTestServer(t, "tcp")
	apply(s, "file", singleRouter(be.addr(), nil))
	before := pipeFDs(t)
	held := holdN(t, 200, "127.0.0.1", s.addr("tcp"))
	if len(held) != 200 {
		t.Fatalf("%d of 200 forwarded", len(held))
	}
	for i, c := range held {
		if !ping(c) { // data has crossed both copiers at least twice
			t.Fatalf("connection %d stopped echoing", i)
		}
	}
	if n := pipeFDs(t) - before; n > 16 {
		t.Fatalf("%d pipe descriptors held by 200 idle connections, want at most a small pooled handful", n)
	}
}

func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}
