// Package logs is tollgate's own log and its access log as files: the log
// as Traefik writes its own (log.format common, its zerolog console lines,
// or json; level ERROR and common when unset; log.filePath rotated by
// lumberjack at log.maxSize, as Traefik's), and both files reopened on
// SIGUSR1, so that logrotate's `postrotate kill -USR1` leaves tollgate
// writing to the new file. internal/process builds them and calls Reopen.
package logs

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/tollgate-proxy/tollgate/config"
)

// Log is tollgate's log: its logger and, when it writes to a file, that
// file's writer.
type Log struct {
	Logger zerolog.Logger
	file   *lumberjack.Logger // nil: stdout
}

// New builds the log cfg configures, writing to stdout unless
// log.filePath is set. The error names the option at fault.
func New(cfg *config.Log, stdout *os.File) (*Log, error) {
	l := &Log{}
	var out io.Writer = stdout
	if cfg.FilePath != "" {
		// Opened once here so that a path that cannot be written is an
		// error at start naming it, not a log that silently goes nowhere;
		// lumberjack opens it again at the first line.
		f, err := os.OpenFile(cfg.FilePath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log.filePath=%q: %w", cfg.FilePath, err)
		}
		_ = f.Close()
		l.file = RotatingFile(cfg)
		out = l.file
	}
	if !strings.EqualFold(cfg.Format, "json") {
		out = Common(out, cfg.NoColor || cfg.FilePath != "" || !isTerminal(stdout))
	}
	level := Level(cfg.Level)
	// No private key reaches the log, whatever message quotes one.
	ctx := zerolog.New(config.RedactingWriter(out)).Level(level).With().Timestamp()
	if level <= zerolog.DebugLevel {
		ctx = ctx.Caller() // as Traefik, at DEBUG
	}
	l.Logger = ctx.Logger()
	return l, nil
}

// RotatingFile is log.filePath as Traefik writes it: lumberjack, rotated at
// log.maxSize megabytes (100 when 0), keeping log.maxBackups files for
// log.maxAge days (0: no limit), gzipped with log.compress.
func RotatingFile(cfg *config.Log) *lumberjack.Logger {
	return &lumberjack.Logger{
		Filename:   cfg.FilePath,
		MaxSize:    cfg.MaxSize,
		MaxAge:     cfg.MaxAge,
		MaxBackups: cfg.MaxBackups,
		Compress:   cfg.Compress,
	}
}

// Common is Traefik's common format: zerolog's console lines ("2026-01-02T15:04:05Z
// ERR message key=value"), with RFC 3339 times, in colour unless noColor.
func Common(out io.Writer, noColor bool) zerolog.ConsoleWriter {
	return zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339, NoColor: noColor}
}

// Level is log.level as zerolog's level: ERROR when empty, as Traefik's;
// WARN and WARNING are warn. Validate refuses the others it does not know.
func Level(s string) zerolog.Level {
	switch strings.ToUpper(s) {
	case "":
		return zerolog.ErrorLevel
	case "WARN", "WARNING":
		return zerolog.WarnLevel
	}
	level, err := zerolog.ParseLevel(strings.ToLower(s))
	if err != nil {
		return zerolog.ErrorLevel
	}
	return level
}

// Reopen closes the log file, if there is one: the next line opens
// log.filePath again, a new file if logrotate moved the old one away.
func (l *Log) Reopen() error {
	if l.file == nil {
		return nil
	}
	return l.file.Close()
}

// isTerminal reports whether f is a terminal: colours only there, as escape
// codes in a file or `docker logs` break grep and log shippers.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// File is an access log file that Reopen opens again at its path, for
// logrotate (Traefik's access log does the same on SIGUSR1). Each Write is
// one write(2) of the line, under a lock that only Reopen contends for.
type File struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// OpenFile opens path for appending (created 0644). key names the option
// in the error.
func OpenFile(key, path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", key, path, err)
	}
	return &File{path: path, f: f}, nil
}

// Write writes p to the file open now.
func (r *File) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

// Reopen opens the path again and writes there from now on; when it
// cannot, the file open until now stays, and the error says why.
func (r *File) Reopen() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("reopening %s: %w", r.path, err)
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}
