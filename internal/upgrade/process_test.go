package upgrade

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
)

// The test binary plays the new process when started by Start (helperMode
// says how): the two ends of a handover in real processes.
const helperMode = "UPGRADE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperMode); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	fd, err := TakeEnv()
	if err != nil || fd < 0 {
		return 10
	}
	st := &Stats{}
	p, err := Inherit(fd, st)
	if err != nil {
		return 11
	}
	switch mode {
	case "hang":
		time.Sleep(time.Minute)
		return 0
	case "fail":
		p.Fail(os.ErrPermission)
		return 1
	}
	if p.Ready(Ready{PID: os.Getpid()}) != nil {
		return 12
	}
	snap, err := p.WaitSnapshot(10 * time.Second)
	if err != nil {
		return 13
	}
	if mode == "die" {
		return 3
	}
	var reg inflightconn.Registry
	p.Import(&reg, snap.Limiters)
	l := reg.Lookup("m@file")
	if l == nil || l.Stats().InFlight != 3 || l.Acquire(netip.MustParseAddr("10.0.0.1")) {
		return 14 // 3 imported, amount 3: nothing more for that key
	}
	if p.Started(os.Getpid()) != nil {
		return 15
	}
	if err := p.Run(); err != nil { // releases, then bye
		return 16
	}
	if l.Stats().InFlight != 0 || st.ReleasesReceived.Load() != 4 || st.Outstanding.Load() != 0 || st.AcquiresAnswered.Load() != 2 {
		return 17 // the 3 handed over and the one granted, all released
	}
	return 0
}

func helperCommand(t *testing.T, mode string) Command {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Command{Path: exe, Args: []string{exe, "-test.run=^$"}, Env: append(os.Environ(), helperMode+"="+mode)}
}

func hello() Hello { return Hello{Version: Version, Generation: 2, PID: os.Getpid()} }

func exitCode(t *testing.T, s *Successor) int {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the helper did not exit")
	}
	return s.cmd.ProcessState.ExitCode()
}

func TestReadyTimeoutKillsTheNewProcess(t *testing.T) {
	s, err := Start(helperCommand(t, "hang"), hello(), nil, &Stats{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.WaitReady(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not ready within 300ms") {
		t.Fatalf("WaitReady: %v", err)
	}
	select {
	case <-s.exited:
	default:
		t.Fatal("the process that was not ready still runs")
	}
}

func TestFailMessageIsTheReason(t *testing.T) {
	s, err := Start(helperCommand(t, "fail"), hello(), nil, &Stats{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.WaitReady(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("WaitReady: %v", err)
	}
}

// The new process dies after the snapshot: WaitStarted says so, and the
// old limiter takes its budget back exactly.
func TestDeathAfterTheSnapshot(t *testing.T) {
	s, err := Start(helperCommand(t, "die"), hello(), nil, &Stats{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	l := inflightconn.NewLimiter(2, false, 0)
	k := netip.MustParseAddr("10.0.0.1")
	l.Acquire(k)
	if err := s.SendSnapshot(Snapshot{Limiters: []inflightconn.Export{l.Export("m@file", s.Remote(0))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitStarted(5 * time.Second); err == nil {
		t.Fatal("WaitStarted succeeded for a process that died")
	}
	l.Unexport()
	if !l.Acquire(k) || l.Acquire(k) {
		t.Fatal("after the failed handover the limiter does not count exactly")
	}
}

// A whole handover between two processes: 3 connections handed over, two
// asked for after the export (one granted), 4 releases forwarded, bye.
func TestHandoverBetweenProcesses(t *testing.T) {
	st := &Stats{}
	s, err := Start(helperCommand(t, "serve"), hello(), nil, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	l := inflightconn.NewLimiter(3, false, 0)
	k, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for i := 0; i < 3; i++ {
		l.Acquire(k)
	}
	ex := l.Export("m@file", s.Remote(0))
	if err := s.SendSnapshot(Snapshot{Limiters: []inflightconn.Export{ex}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitStarted(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	granted := make(chan bool, 2)
	l.Remote().Acquire(k, func(ok bool) { granted <- ok })
	l.Remote().Acquire(other, func(ok bool) { granted <- ok })
	a, b := <-granted, <-granted
	if a == b {
		t.Fatalf("grants %v %v: want 10.0.0.1 refused (3 of 3 held) and 10.0.0.2 admitted", a, b)
	}
	l.Import(other, 1) // as the middleware counts a granted connection
	l.Release(other)
	for i := 0; i < 3; i++ {
		l.Release(k)
	}
	s.Close()
	if code := exitCode(t, s); code != 0 {
		t.Fatalf("the new process saw a wrong handover: exit %d", code)
	}
	if st.ReleasesForwarded.Load() != 4 || st.Sent.Connections.Load() != 3 || st.AcquiresGranted.Load() != 1 {
		t.Fatalf("stats: forwarded %d, sent %d, granted %d", st.ReleasesForwarded.Load(), st.Sent.Connections.Load(), st.AcquiresGranted.Load())
	}
}
