// Command echo is a tiny TCP backend for tollgate's demo and tests: on every
// connection it writes one banner line ("<banner>\n") and then echoes back
// whatever it reads until the client closes.
//
// It is built static (CGO_ENABLED=0) and copied into a FROM scratch image, so
// it also carries its own health check: `echo -check` dials the listen
// address and exits 0 when the banner arrives, 1 otherwise.
//
//	echo [-listen :7000] [-banner TEXT] [-check]
//
// The banner defaults to $BANNER, else the host name (the container ID).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", envOr("LISTEN", ":7000"), "address to listen on")
	banner := flag.String("banner", os.Getenv("BANNER"), "first line sent on every connection (default: host name)")
	check := flag.Bool("check", false, "health check: dial the listen address, expect a banner, exit 0 or 1")
	flag.Parse()

	if *check {
		os.Exit(healthCheck(*listen))
	}
	if *banner == "" {
		*banner, _ = os.Hostname()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("echo: listen %s: %v", *listen, err)
	}
	log.Printf("echo: listening on %s with banner %q", ln.Addr(), *banner)
	line := []byte(*banner + "\n")
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			log.Fatalf("echo: accept: %v", err)
		}
		go serve(c, line)
	}
}

func serve(c net.Conn, banner []byte) {
	defer c.Close()
	if _, err := c.Write(banner); err != nil {
		return
	}
	_, _ = io.Copy(c, c)
}

func healthCheck(listen string) int {
	addr := listen
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
