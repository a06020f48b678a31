// Command echo is the benchmark's backend: a TCP echo server on loopback.
//
// Every accepted connection gets its bytes written back until the peer
// closes its write half; then echo closes. It serves the connect/echo/close
// cycles, the persistent request/response loops, the admission probes and
// the bulk streams alike, so every proxy is measured against the same
// backend.
package main

import (
	"errors"
	"flag"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:29000", "listen address (must be loopback)")
	bufSize := flag.Int("buf", 32<<10, "per-connection copy buffer in bytes")
	flag.Parse()

	ap, err := netip.ParseAddrPort(*addr)
	if err != nil || !ap.Addr().IsLoopback() {
		log.Fatalf("echo: -addr %q: want a loopback ip:port", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("echo: listen %s: %v", *addr, err)
	}
	log.Printf("echo: listening on %s (pid %d)", ln.Addr(), os.Getpid())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; ln.Close() }()

	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: keep serving, but do not spin on them.
			log.Printf("echo: accept: %v", err)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		go serve(c.(*net.TCPConn), *bufSize)
	}
}

// serve echoes with a plain read/write loop, not io.Copy: io.Copy between
// TCP connections splices through a pipe that holds two more descriptors for
// the life of the connection, and the idle-memory scenario needs the fds.
func serve(c *net.TCPConn, bufSize int) {
	defer c.Close()
	buf := make([]byte, bufSize)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
