// Command forward is a test client that lives in a container: it accepts
// connections on -listen and forwards each one to -to over a connection of
// its own, so that the target sees it come from the container's address.
// The end-to-end tests of the Swarm provider run several of them on an
// overlay network, each with its own address, and reach them through a port
// published on 127.0.0.1: one host connection is one connection from that
// client address. Built static (CGO_ENABLED=0) into a FROM scratch image.
//
//	forward -to 10.0.1.5:5432 [-listen :9000]
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"time"
)

func main() {
	listen := flag.String("listen", ":9000", "address to listen on")
	to := flag.String("to", "", "address to forward every connection to")
	flag.Parse()
	if *to == "" {
		log.Fatal("forward: -to is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("forward: listen %s: %v", *listen, err)
	}
	log.Printf("forward: %s -> %s", ln.Addr(), *to)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("forward: accept: %v", err)
		}
		go forward(c, *to)
	}
}

// forward copies both ways between c and a new connection to to, and closes
// both as soon as either direction ends: a connection the target rejects
// (closed or reset) is closed on the client's side too.
func forward(c net.Conn, to string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		log.Printf("forward: dial %s: %v", to, err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}
