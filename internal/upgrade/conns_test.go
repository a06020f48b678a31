package upgrade

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestConnRecordRoundTrip(t *testing.T) {
	for _, c := range []Conn{
		{EntryPoint: "db", Read: []byte("PROXY TCP4 198.51."), Deadline: 2 * time.Second, Silent: time.Millisecond},
		{EntryPoint: "pg", Read: []byte{0, 0, 0, 8, 4, 210, 22, 47}, Answered: 1},
		{EntryPoint: "e"},
		{EntryPoint: "long", Deadline: 10 * maxWait, Silent: 2 * maxWait}, // crosses, as maxWait
	} {
		b, err := encodeConn(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeConn(b)
		c.Deadline, c.Silent = min(c.Deadline, maxWait), min(c.Silent, maxWait)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, c)
		}
		for n := 0; n < len(b); n++ {
			if _, err := decodeConn(b[:n]); !errors.Is(err, errFrame) {
				t.Fatalf("a record cut at %d of %d decoded: %v", n, len(b), err)
			}
		}
	}
	for _, c := range []Conn{{EntryPoint: "db", Answered: 256}, {EntryPoint: "db", Read: make([]byte, maxConnRecord)}, {EntryPoint: "db", Deadline: -1}} {
		if _, err := encodeConn(c); err == nil {
			t.Errorf("encoded %d answers, %d bytes, deadline %v", c.Answered, len(c.Read), c.Deadline)
		}
	}
}

// A connection's socket crosses the channel with its record: the receiving
// end holds the same socket (a byte written through it reaches the peer). A
// malformed record costs its descriptor and the reader reads on; the old
// end closing ends it.
func TestConnChannelCarriesSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := server.(*net.TCPConn).File()
	server.Close()
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs, err := newConnChannel()
	if err != nil {
		t.Fatal(err)
	}
	st := &Stats{}
	s := &Successor{conns: mine, connsOK: true, st: st}
	p := &Predecessor{conns: connChannel{fd: int(theirs.Fd())}, st: st}
	defer theirs.Close()

	// A garbage record with a descriptor of its own, then the real one.
	junk, _ := os.Open(os.DevNull)
	if err := unix.Sendmsg(mine.fd, []byte{9, 9}, unix.UnixRights(int(junk.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	junk.Close()
	want := Conn{EntryPoint: "db", Read: []byte("PROXY "), Deadline: time.Second}
	if err := s.SendConn(want, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close() // the message holds the socket
	s.EndConns()
	if err := s.SendConn(want, 0); err == nil {
		t.Fatal("a send after EndConns succeeded")
	}

	var got []Conn
	var fds []int
	var failures []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ServeConns(func(c Conn, fd int) { got, fds = append(got, c), append(fds, fd) },
			func(err error) { failures = append(failures, err) })
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConns did not return after the old end closed")
	}
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "version 9") {
		t.Fatalf("failures %v, want the junk record's", failures)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("received %+v, want %+v", got, want)
	}
	if _, err := unix.Write(fds[0], []byte("x")); err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[0])
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 2)
	n, _ := client.Read(b)
	if !bytes.Equal(b[:n], []byte("x")) {
		t.Fatalf("the client read %q through the handed socket, want %q", b[:n], "x")
	}
	if st.UnroutedSent.Load() != 1 || st.UnroutedReceived.Load() != 1 {
		t.Fatalf("sent %d, received %d; want 1 and 1", st.UnroutedSent.Load(), st.UnroutedReceived.Load())
	}
}

// A new process that reads no connections (Ready.Connections false, or an
// old process that offered none) gets none.
func TestSendConnNeedsAReader(t *testing.T) {
	mine, theirs, err := newConnChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	defer mine.close()
	s := &Successor{conns: mine, st: &Stats{}}
	if err := s.SendConn(Conn{EntryPoint: "db"}, int(theirs.Fd())); err == nil {
		t.Fatal("sent to a process that did not say it reads connections")
	}
}

// FuzzConnRecord: no record decodes to a connection it could not have
// encoded, and none panics.
func FuzzConnRecord(f *testing.F) {
	b, _ := encodeConn(Conn{EntryPoint: "db", Read: []byte("PROXY TCP4 "), Answered: 1, Deadline: time.Second})
	f.Add(b)
	f.Add([]byte{connVersion, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeConn(data)
		if err != nil {
			return
		}
		again, err := encodeConn(c)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		if c2, err := decodeConn(again); err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("re-encoded record differs: %+v, %v", c2, err)
		}
	})
}

// A channel whose new process is gone fails its first send, and is given up:
// the rest fail without a send (none waits out the send timeout).
func TestSendConnGivesUpOnAGoneChannel(t *testing.T) {
	mine, theirs, err := newConnChannel()
	if err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	s := &Successor{conns: mine, connsOK: true, st: &Stats{}}
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	if err := s.SendConn(Conn{EntryPoint: "db"}, int(f.Fd())); err == nil {
		t.Fatal("sent to a channel with no reader")
	}
	if err := s.SendConn(Conn{EntryPoint: "db"}, int(f.Fd())); err == nil || !strings.Contains(err.Error(), "channel closed") {
		t.Fatalf("second send: %v, want the channel given up", err)
	}
}

// A hello's connection channel may not be a standard descriptor or one of
// the listeners'.
func TestHelloConnectionChannel(t *testing.T) {
	for fd, ok := range map[int]bool{0: true, 5: true, 2: false, 4: false, 1<<20 + 1: false} {
		b := fmt.Sprintf(`{"version":1,"generation":2,"pid":10,"listeners":[{"name":"db","address":":5432","fd":4}],"connsFd":%d}`, fd)
		h, err := decodeHello([]byte(b))
		if ok && (err != nil || h.ConnsFD != fd) {
			t.Errorf("connsFd %d: %v", fd, err)
		}
		if !ok && !errors.Is(err, errFrame) {
			t.Errorf("connsFd %d accepted: %v", fd, err)
		}
	}
}

// Each received record's bytes are its own: the receive buffer is reused for
// the next record while the connection is still being adopted.
func TestConnRecordsOwnTheirBytes(t *testing.T) {
	mine, theirs, err := newConnChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	st := &Stats{}
	s := &Successor{conns: mine, connsOK: true, st: st}
	p := &Predecessor{conns: connChannel{fd: int(theirs.Fd())}, st: st}
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	for _, read := range []string{"PROXY TCP4 198.51.100.1 ", "PROXY TCP4 203.0.113.77 192.0.2.1 "} {
		if err := s.SendConn(Conn{EntryPoint: "db", Read: []byte(read)}, int(f.Fd())); err != nil {
			t.Fatal(err)
		}
	}
	s.EndConns()
	var got []Conn
	p.ServeConns(func(c Conn, fd int) { got = append(got, c); _ = unix.Close(fd) }, func(err error) { t.Error(err) })
	if len(got) != 2 || string(got[0].Read) != "PROXY TCP4 198.51.100.1 " || string(got[1].Read) != "PROXY TCP4 203.0.113.77 192.0.2.1 " {
		t.Fatalf("received %+v", got)
	}
}
