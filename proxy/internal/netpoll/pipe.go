package netpoll

import "golang.org/x/sys/unix"

// Pipe is a kernel pipe used as the splice buffer between two sockets.
type Pipe struct {
	R, W int // the read and write ends
	Size int // capacity in bytes
}

// NewPipe makes a pipe, or returns nil when none can be made (out of
// descriptors): the copy then goes through a buffer.
func NewPipe(want int) *Pipe {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	size, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, want)
	if err != nil || size <= 0 {
		size = 64 << 10 // the default
	}
	return &Pipe{R: fds[0], W: fds[1], Size: size}
}

// Close closes both ends (the bytes in it, if any, are lost).
func (p *Pipe) Close() {
	_ = Close(p.R)
	_ = Close(p.W)
}

// PipeSize is the size asked of new pipes: room for a chunk made of many
// partial pages (a NIC's packets), each taking one of the pipe's slots.
const PipeSize = 1 << 20
