package netpoll

import (
	"errors"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListenKey(t *testing.T) {
	for _, tc := range []struct{ addr, key string }{
		{"127.0.0.1:5432", "127.0.0.1:5432"},
		{"localhost:5432", "127.0.0.1:5432"},
		{"127.0.0.1:05432", "127.0.0.1:5432"},
		{"[::ffff:127.0.0.1]:5432", "127.0.0.1:5432"},
		{":5432", ":5432"},
		{"[]:5432", ":5432"},
		{"0.0.0.0:5432", "0.0.0.0:5432"}, // IPv4 only: not the dual-stack ":5432"
		{"[::]:5432", "[::]:5432"},       // IPv6 only
		{"[::1]:5432", "[::1]:5432"},
		{"[0:0::1]:5432", "[::1]:5432"},
		{"db.internal:5432", "db.internal:5432"}, // not bound by Listen: as written
		{"127.0.0.1:postgres", "127.0.0.1:postgres"},
		{"nonsense", "nonsense"},
	} {
		if got := ListenKey(tc.addr); got != tc.key {
			t.Errorf("ListenKey(%q) = %q, want %q", tc.addr, got, tc.key)
		}
	}
}

// Addresses with one key bind one socket: the second bind of the same key,
// however spelled, is refused by the kernel (which is why an upgrade must
// take the socket over rather than bind it).
func TestListenKeyIsWhatTheKernelBinds(t *testing.T) {
	fd, bound, _, err := Listen("localhost:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	port := strconv.Itoa(int(bound.Port()))
	for _, addr := range []string{"127.0.0.1:" + port, "[::ffff:127.0.0.1]:" + port, "127.0.0.1:0" + port} {
		if ListenKey(addr) != ListenKey("localhost:"+port) {
			t.Errorf("ListenKey(%q) = %q, differs from localhost's %q", addr, ListenKey(addr), ListenKey("localhost:"+port))
		}
		fd2, _, _, err := Listen(addr, false)
		if err == nil {
			unix.Close(fd2)
			t.Errorf("%s bound beside localhost:%s: not the same socket", addr, port)
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("%s: %v, want address already in use", addr, err)
		}
	}
}

// A listening address, however malformed, gets a key and never a panic; a
// key is its own key (so two spellings of one socket meet at one key), and
// an address Listen accepts keys to one it accepts too.
func FuzzListenKey(f *testing.F) {
	for _, s := range []string{":5432", "localhost:5432", "[::ffff:127.0.0.1]:05432", "0.0.0.0:1", "[::]:1", "[fe80::1%eth0]:80", "x", "[]:1", "1.2.3.4:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		k := ListenKey(addr)
		if k2 := ListenKey(k); k2 != k {
			t.Fatalf("ListenKey(%q) = %q, whose key is %q", addr, k, k2)
		}
		if _, _, err := ParseListenAddr(addr); err == nil {
			if _, _, err := ParseListenAddr(k); err != nil {
				t.Fatalf("%q parses, its key %q does not: %v", addr, k, err)
			}
		}
	})
}
