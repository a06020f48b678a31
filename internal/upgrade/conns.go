package upgrade

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The connection channel carries the connections the old process accepted
// and had not routed when it stopped accepting (proxy.Handed), after the new
// process accepts. It is a SOCK_SEQPACKET socketpair of its own, beside the
// state channel: each message is one connection, its socket in the
// message's SCM_RIGHTS and, as the payload,
//
//	u8 version (1), u16 entry point name length, name, u8 answered,
//	u64 deadline ns, u64 silent ns, u32 length, the bytes read
//
// so the descriptor always travels with its record, and a stream reader
// never has to find where one ends. The old process closes its end when
// it has sent them all.

const connVersion = 1

// maxConnRecord bounds a record: a PROXY v2 header (16 KiB) and a
// ClientHello (32 KiB) with room to spare.
const maxConnRecord = 64 << 10

// sendTimeout bounds one record's send: a new process that reads nothing
// does not hold the old one.
const sendTimeout = 5 * time.Second

// maxWait bounds a record's deadlines: longer ones are sent as this (a
// year), so that any configured readTimeout crosses.
const maxWait = 365 * 24 * time.Hour

// Conn is one handed connection's record (its socket travels beside it).
type Conn struct {
	EntryPoint string
	Read       []byte
	Answered   int
	// Deadline and Silent are the time left to its read deadline and its
	// server-first wait; 0 for none.
	Deadline, Silent time.Duration
}

func encodeConn(c Conn) ([]byte, error) {
	if len(c.EntryPoint) > maxName || c.Answered < 0 || c.Answered > 255 || c.Deadline < 0 || c.Silent < 0 {
		return nil, fmt.Errorf("handed connection of entry point %q: not encodable", c.EntryPoint)
	}
	b := make([]byte, 0, 1+2+len(c.EntryPoint)+1+8+8+4+len(c.Read))
	b = append(b, connVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.EntryPoint)))
	b = append(b, c.EntryPoint...)
	b = append(b, byte(c.Answered))
	b = binary.BigEndian.AppendUint64(b, uint64(min(c.Deadline, maxWait)))
	b = binary.BigEndian.AppendUint64(b, uint64(min(c.Silent, maxWait)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Read)))
	b = append(b, c.Read...)
	if len(b) > maxConnRecord {
		return nil, fmt.Errorf("handed connection of entry point %q: %d bytes read, more than a record holds", c.EntryPoint, len(c.Read))
	}
	return b, nil
}

func decodeConn(b []byte) (Conn, error) {
	r := &reader{b: b}
	var c Conn
	if v := r.u8(); r.err == nil && v != connVersion {
		return c, fmt.Errorf("%w: handed connection record of version %d, this tollgate reads %d", errFrame, v, connVersion)
	}
	c.EntryPoint = r.name()
	c.Answered = int(r.u8())
	d, s := r.u64(), r.u64()
	c.Read = r.take(int(r.u32()))
	switch {
	case r.err != nil:
		return Conn{}, fmt.Errorf("%w: handed connection record cut short", errFrame)
	case len(r.b) > 0:
		return Conn{}, fmt.Errorf("%w: %d bytes after a handed connection record", errFrame, len(r.b))
	case c.EntryPoint == "" || d > uint64(maxWait) || s > uint64(maxWait):
		return Conn{}, fmt.Errorf("%w: handed connection record: entry point %q, deadline %d ns, silent %d ns", errFrame, c.EntryPoint, d, s)
	}
	c.Deadline, c.Silent = time.Duration(d), time.Duration(s)
	// The record's own copy: b is the receive buffer, reused for the next
	// record while this connection is still being adopted.
	c.Read = bytes.Clone(c.Read)
	if len(c.Read) == 0 {
		c.Read = nil
	}
	return c, nil
}

// connChannel is one end of the connection channel.
type connChannel struct {
	mu sync.Mutex
	fd int // -1 once closed
}

func (ch *connChannel) close() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.fd >= 0 {
		_ = unix.Close(ch.fd)
		ch.fd = -1
	}
}

// newConnChannel returns the old process's end and the new process's end
// (a file for ExtraFiles).
func newConnChannel() (*connChannel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	tv := unix.NsecToTimeval(int64(sendTimeout))
	_ = unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	_ = unix.Shutdown(fds[0], unix.SHUT_RD)
	return &connChannel{fd: fds[0]}, os.NewFile(uintptr(fds[1]), "handover-conns"), nil
}

// SendConn gives the new process connection c on socket fd. fd stays the
// caller's, to close: the message holds its own reference. An error means
// the new process does not have it.
func (s *Successor) SendConn(c Conn, fd int) error {
	if !s.connsOK {
		return errors.New("the new process takes no connections")
	}
	b, err := encodeConn(c)
	if err != nil {
		return err
	}
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	if s.conns.fd < 0 {
		return errors.New("connection channel closed")
	}
	for {
		err = unix.Sendmsg(s.conns.fd, b, unix.UnixRights(fd), nil, unix.MSG_NOSIGNAL)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		// A channel that failed once (the new process gone, or not
		// reading within sendTimeout) is given up: the rest fail at once.
		_ = unix.Close(s.conns.fd)
		s.conns.fd = -1
		return fmt.Errorf("connection channel: %w", err)
	}
	s.st.UnroutedSent.Add(1)
	return nil
}

// EndConns closes the old process's end of the connection channel: every
// connection is sent (the new process reads to the end).
func (s *Successor) EndConns() { s.conns.close() }

// ServeConns hands adopt each connection the old process sends, until it
// closes its end; adopt owns fd. It returns at once when the old process
// offered no channel. Call it when this process accepts (after Started).
func (p *Predecessor) ServeConns(adopt func(c Conn, fd int), failed func(error)) {
	p.conns.mu.Lock()
	fd := p.conns.fd
	p.conns.mu.Unlock()
	if fd < 0 {
		return
	}
	defer p.conns.close()
	buf := make([]byte, maxConnRecord+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			failed(fmt.Errorf("connection channel: %w", err))
			return
		}
		if n == 0 && oobn == 0 {
			return // the old process sent them all
		}
		fds := rights(oob[:oobn])
		c, err := decodeConn(buf[:n])
		switch {
		case err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			err = fmt.Errorf("%w: handed connection record truncated", errFrame)
		case err == nil && len(fds) != 1:
			err = fmt.Errorf("%w: handed connection record with %d descriptors", errFrame, len(fds))
		}
		if err != nil {
			for _, f := range fds {
				_ = unix.Close(f)
			}
			failed(err)
			continue
		}
		p.st.UnroutedReceived.Add(1)
		adopt(c, fds[0])
	}
}

// rights returns the descriptors an SCM_RIGHTS message carried.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}
