package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A file is applied only once its writer is done with it. A writer that
// rewrites a file in place (truncate, write, maybe pause, write, close)
// leaves it half-written for as long as it likes, and a half-written file
// can parse: a source range cut short from 10.0.0.0/16 to 10.0.0.0/1 opens
// access. Linux says when a writer closes a file it wrote (IN_CLOSE_WRITE).
// fsnotify v1.10.1, the newest release served here, keeps that event
// unexported (xUnportableCloseWrite), so the directory is watched with
// inotify directly: one ordered stream of writes, closes, creations, renames
// and deletions.

// watchMask is what the directory watch reports.
const watchMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// dirEvent is one change of a name in the watched directory.
type dirEvent struct {
	name string // base name; empty for the directory itself
	mask uint32
}

// Has reports whether the event carries every bit of m.
func (e dirEvent) Has(m uint32) bool { return e.mask&m == m }

// errOverflow is sent when the kernel dropped events: everything must be
// re-read.
var errOverflow = errors.New("inotify queue overflow: events were lost")

// dirWatcher watches one directory.
type dirWatcher struct {
	f      *os.File // the inotify descriptor, non-blocking, read through the poller
	Events chan dirEvent
	Errors chan error
	done   chan struct{}
}

// watchDir starts watching dir. Close stops it.
func watchDir(dir string) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("watching %q: %w", dir, err)
	}
	w := &dirWatcher{
		f:      os.NewFile(uintptr(fd), "inotify"),
		Events: make(chan dirEvent, 64),
		Errors: make(chan error, 1),
		done:   make(chan struct{}),
	}
	go w.read()
	return w, nil
}

// Close stops the watcher; its reader ends and closes Events.
func (w *dirWatcher) Close() error {
	err := w.f.Close() // wakes the reader
	<-w.done
	return err
}

// read decodes events until the descriptor is closed.
func (w *dirWatcher) read() {
	defer close(w.done)
	defer close(w.Events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.report(fmt.Errorf("reading inotify events: %w", err))
			}
			return
		}
		for _, ev := range parseEvents(buf[:n]) {
			if ev.mask&unix.IN_Q_OVERFLOW != 0 {
				w.report(errOverflow)
				continue
			}
			w.Events <- ev
		}
	}
}

func (w *dirWatcher) report(err error) {
	select {
	case w.Errors <- err:
	default: // one pending error is enough to make the reader re-read
	}
}

// parseEvents decodes a buffer of struct inotify_event records.
func parseEvents(b []byte) []dirEvent {
	var out []dirEvent
	for len(b) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(b) {
			break
		}
		name := b[unix.SizeofInotifyEvent:end]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		out = append(out, dirEvent{name: string(name), mask: mask})
		b = b[end:]
	}
	return out
}
