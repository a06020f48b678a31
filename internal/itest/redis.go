package itest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis is a redis-server (Debian's) a test started on a loopback port of
// its own, without persistence; Stop ends it by its PID and Start runs it
// again on the same port (its data gone, as after a crash without a disk).
type Redis struct {
	// Addr is host:port.
	Addr string
	Port int
	bin  string
	args []string
	proc *Proc
	t    testing.TB
}

// RedisBinary finds redis-server on PATH.
func RedisBinary() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("no redis-server on PATH: apt-get install -y redis-server")
	}
	return bin, nil
}

// StartRedis starts a redis-server with the extra args (skipping through
// Need when there is none) and stops it at cleanup.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	bin, err := RedisBinary()
	Need(t, "redis-server", err)
	r := &Redis{bin: bin, Port: FreePort(t), args: args, t: t}
	r.Addr = "127.0.0.1:" + strconv.Itoa(r.Port)
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start runs the server (again) and waits until it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning"}, r.args...)
	p, err := StartProc(r.bin, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.proc = p
	password := "" // --requirepass among the args: PING after AUTH
	for i, a := range r.args[:max(len(r.args)-1, 0)] {
		if a == "--requirepass" {
			password = r.args[i+1]
		}
	}
	if err := Ready(p, 15*time.Second, func() error { return redisAuthPing(r.Addr, password) }); err != nil {
		r.t.Fatal(err)
	}
}

// Stop ends the server by its PID (SIGTERM, then SIGKILL) and waits for it.
func (r *Redis) Stop() {
	if r.proc != nil {
		r.proc.Stop()
	}
}

// PID returns the running server's process id.
func (r *Redis) PID() int { return r.proc.PID() }

// Sentinel is a redis-server in Sentinel mode a test started on a loopback
// port of its own; it is stopped at cleanup.
type Sentinel struct {
	// Addr is host:port.
	Addr string
	proc *Proc
}

// StartSentinel starts a Sentinel that monitors master (host:port) as
// "mymaster" with quorum 1, deciding it down after 500 ms of silence, with
// the extra configuration lines conf ("requirepass <password>", say), and
// waits until it answers PING (after AUTH password, when password is set).
// It skips through Need when there is no redis-server.
func StartSentinel(t testing.TB, master, password string, conf ...string) *Sentinel {
	t.Helper()
	bin, err := RedisBinary()
	Need(t, "redis-server", err)
	host, port, _ := net.SplitHostPort(master)
	lines := append([]string{
		"sentinel monitor mymaster " + host + " " + port + " 1",
		"sentinel down-after-milliseconds mymaster 500",
		"sentinel failover-timeout mymaster 5000",
	}, conf...)
	// Sentinel rewrites its file: one of its own in a directory of the test's.
	file := WriteFile(t, "sentinel.conf", strings.Join(lines, "\n")+"\n")
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(FreePort(t))}
	_, sport, _ := net.SplitHostPort(s.Addr)
	p, err := StartProc(bin, file, "--sentinel", "--port", sport, "--bind", "127.0.0.1", "--loglevel", "warning")
	if err != nil {
		t.Fatal(err)
	}
	s.proc = p
	t.Cleanup(p.Stop)
	if err := Ready(p, 15*time.Second, func() error { return redisAuthPing(s.Addr, password) }); err != nil {
		t.Fatal(err)
	}
	return s
}

// redisAuthPing sends AUTH password (when set) and PING, and expects +OK and
// +PONG.
func redisAuthPing(addr, password string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	req, want := "PING\r\n", "+PONG\r\n"
	if password != "" {
		req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password) + req
		want = "+OK\r\n" + want
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	b := make([]byte, len(want))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != want {
		return errors.New("redis answered " + strconv.Quote(string(b)))
	}
	return nil
}
