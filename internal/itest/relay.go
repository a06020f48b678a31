package itest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Relay is a unix-socket proxy to another unix socket (the Docker engine's)
// that a test can cut (close every connection, refuse new ones) and restore:
// the source of a provider going away and coming back.
type Relay struct {
	// Path is the relay's socket.
	Path     string
	upstream string
	ln       net.Listener
	mu       sync.Mutex
	cut      bool
	refused  int
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

// NewRelay listens on a new socket (in a directory with a short path: unix
// socket paths are limited to 108 bytes) and relays each connection to
// upstream until t ends.
func NewRelay(t testing.TB, upstream string) *Relay {
	t.Helper()
	dir, err := os.MkdirTemp("", "tg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &Relay{Path: filepath.Join(dir, "docker.sock"), upstream: upstream, conns: map[net.Conn]bool{}}
	r.ln, err = net.Listen("unix", r.Path)
	if err != nil {
		t.Fatal(err)
	}
	// Anyone may connect: a container that mounts the socket runs as its
	// own user.
	_ = os.Chmod(r.Path, 0o777)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		r.ln.Close()
		r.SetCut(true)
		r.wg.Wait()
	})
	return r
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.cut {
			r.refused++
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go r.pipe(c)
	}
}

func (r *Relay) pipe(c net.Conn) {
	defer r.wg.Done()
	up, err := net.Dial("unix", r.upstream)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	r.conns[up] = true
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

// Refused is the number of connections refused while cut.
func (r *Relay) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// SetCut cuts the relay (every open connection is closed, new ones are
// accepted and closed at once) or restores it.
func (r *Relay) SetCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.conns {
			c.Close()
		}
	}
}
