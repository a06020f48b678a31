package itest

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
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
	if err := Ready(p, 15*time.Second, func() error { return redisPing(r.Addr) }); err != nil {
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

// redisPing sends PING in RESP and expects +PONG.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	b := make([]byte, 7)
	n, err := c.Read(b)
	if err != nil {
		return err
	}
	if string(b[:n]) != "+PONG\r\n" {
		return errors.New("redis answered " + strconv.Quote(string(b[:n])))
	}
	return nil
}
