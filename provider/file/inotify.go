package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

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

// dirEvent is one change of a name in a watched directory.
type dirEvent struct {
	dir  string // the watched directory, as given to watchDir or add
	name string // base name; empty for the directory itself
	mask uint32
	wd   int32
}

// Has reports whether the event carries every bit of m.
func (e dirEvent) Has(m uint32) bool { return e.mask&m == m }

// errOverflow is sent when the kernel dropped events: everything must be
// re-read.
var errOverflow = errors.New("inotify queue overflow: events were lost")

// dirWatcher watches directories: the configuration's, and those of the
// TLS files it names (add, remove).
type dirWatcher struct {
	f      *os.File // the inotify descriptor, non-blocking, read through the poller
	fd     int
	Events chan dirEvent
	Errors chan error
	done   chan struct{}

	mu   sync.Mutex
	dirs map[int32]string // by watch descriptor
	wds  map[string]int32
}

// watchDir starts watching dir. Close stops it.
func watchDir(dir string) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	wd, err := unix.InotifyAddWatch(fd, dir, watchMask)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("watching %q: %w", dir, err)
	}
	w := &dirWatcher{
		f:      os.NewFile(uintptr(fd), "inotify"),
		fd:     fd,
		Events: make(chan dirEvent, 64),
		Errors: make(chan error, 1),
		done:   make(chan struct{}),
		dirs:   map[int32]string{int32(wd): dir},
		wds:    map[string]int32{dir: int32(wd)},
	}
	go w.read()
	return w, nil
}

// add watches one more directory (nothing when it is watched already).
func (w *dirWatcher) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.wds[dir]; ok {
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return fmt.Errorf("watching %q: %w", dir, err)
	}
	if old, ok := w.dirs[int32(wd)]; ok {
		// The same directory under another name (a symlink): keep one.
		delete(w.wds, old)
	}
	w.dirs[int32(wd)], w.wds[dir] = dir, int32(wd)
	return nil
}

// remove stops watching dir.
func (w *dirWatcher) remove(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, ok := w.wds[dir]
	if !ok {
		return
	}
	delete(w.wds, dir)
	delete(w.dirs, wd)
	_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
}

// watched returns the directories watched.
func (w *dirWatcher) watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.wds))
	for d := range w.wds {
		out = append(out, d)
	}
	return out
}

// dirOf returns the directory of watch descriptor wd ("" when no longer
// watched).
func (w *dirWatcher) dirOf(wd int32) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dirs[wd]
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
			if ev.mask&unix.IN_IGNORED != 0 {
				continue // a watch removed
			}
			if ev.dir = w.dirOf(ev.wd); ev.dir == "" {
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
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
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
		out = append(out, dirEvent{wd: wd, name: string(name), mask: mask})
		b = b[end:]
	}
	return out
}
