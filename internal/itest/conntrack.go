package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Loopback connections are tracked by netfilter when the conntrack module
// is loaded (the Docker engine loads it), two entries per proxied
// connection (client to tollgate, tollgate to backend), and each closed one
// stays in TIME_WAIT for nf_conntrack_tcp_timeout_time_wait (120 s). A test
// that opens 100,000 connections needs 200,000 entries of a table that holds
// 262,144 by default; when the table is full the kernel drops SYNs and
// dials time out. So such a test takes the room it needs first: it holds a
// lock that every test process of this module shares, so that two of them
// never run side by side, and waits until the table has room.

const conntrackDir = "/proc/sys/net/netfilter"

// ConntrackRoom waits until netfilter's connection table has room for
// entries more, holding the lock for t's duration. Without conntrack it
// returns at once. A table too small for entries skips t (fails it with
// TOLLGATE_REQUIRE_INTEGRATION=1), as does a table still full after six
// minutes.
func ConntrackRoom(t testing.TB, entries int) {
	t.Helper()
	max, err := readInt(filepath.Join(conntrackDir, "nf_conntrack_max"))
	if err != nil {
		return // no conntrack: nothing is tracked
	}
	if max < entries+entries/10 {
		Need(t, "a connection-tracking table of "+strconv.Itoa(entries+entries/10)+" entries", fmt.Errorf("net.netfilter.nf_conntrack_max is %d; raise it (sysctl -w net.netfilter.nf_conntrack_max=%d) or unload nf_conntrack", max, 2*entries))
		return
	}
	lock := filepath.Join(os.TempDir(), "tollgate-itest-conntrack.lock")
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("conntrack lock: %v", err)
	}
	t.Cleanup(func() { f.Close() })             // closing the file releases the lock
	deadline := time.Now().Add(6 * time.Minute) // another such test, then its entries expiring
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			t.Fatalf("conntrack lock %s: %v", lock, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Room for entries, and a tenth more for what the other tests open.
	for {
		count, err := readInt(filepath.Join(conntrackDir, "nf_conntrack_count"))
		if err != nil || max-count >= entries+entries/10 {
			return
		}
		if time.Now().After(deadline) {
			Need(t, "room in the connection-tracking table", fmt.Errorf("%d of %d entries in use after 6 minutes, %d needed", count, max, entries+entries/10))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func readInt(name string) (int, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
