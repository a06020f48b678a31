package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/netip"
	"time"
)

// waitCmd is run.sh's readiness probe. In echo mode the target is ready
// when a 1-byte echo comes back through it. In hold mode (for backends that
// speak first or wait for the client, such as PostgreSQL and Redis) it is
// ready when a connection is accepted and stays open: a proxy that has not
// loaded its routes yet closes it at once.
func waitCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	src := fs.String("src", "127.0.0.1", "source address of the probes")
	mode := fs.String("mode", "echo", "echo | hold | tls (a TLS handshake, then a 1-byte echo)")
	hold := fs.Duration("hold", 200*time.Millisecond, "hold mode: how long the connection must stay open")
	return func() (*Result, error) {
		a, err := netip.ParseAddr(*src)
		if err != nil || !a.IsLoopback() {
			return nil, fmt.Errorf("-src %q: want a loopback address", *src)
		}
		if *mode != "echo" && *mode != "hold" && *mode != "tls" {
			return nil, fmt.Errorf("-mode %q: want echo, hold or tls", *mode)
		}
		d := newDialer(a, c.dialTimeout)
		end := time.Now().Add(*timeout)
		for time.Now().Before(end) {
			if *mode == "tls" {
				l := cycleLoad{target: c.target, ioTimeout: time.Second,
					tls: &tls.Config{ServerName: "bench.example", InsecureSkipVerify: true}}
				if l.cycle(d, []byte{'w'}, make([]byte, 1)) == "" {
					return nil, nil
				}
			} else if *mode == "echo" {
				if cn, o, _ := probe(d, c.target, time.Second); o == Admitted {
					cn.Close()
					return nil, nil
				}
			} else if cn, err := d.Dial("tcp", c.target); err == nil {
				cn.SetReadDeadline(time.Now().Add(*hold))
				var b [1]byte
				_, err := cn.Read(b[:])
				cn.Close()
				if isTimeout(err) {
					return nil, nil
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil, fmt.Errorf("%s not ready (%s mode) after %v", c.target, *mode, *timeout)
	}
}
