package logs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// commonLine is Traefik's common format: zerolog's console line with an
// RFC 3339 time, the level in three capitals, the message, then the fields
// as key=value, without colours off a terminal.
var commonLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) (DBG|INF|WRN|ERR) [^{\x1b]+$`)

// newIn builds the log of cfg with its standard output in a file of dir,
// and returns what that file receives.
func newIn(t *testing.T, cfg *config.Log) (*Log, func() string) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	l, err := New(cfg, out)
	if err != nil {
		t.Fatal(err)
	}
	return l, func() string { b, _ := os.ReadFile(out.Name()); return string(b) }
}

// The default is Traefik's: the common format at ERROR.
func TestDefaultIsCommonAtError(t *testing.T) {
	cfg := &config.Log{}
	cfg.SetDefaults()
	l, out := newIn(t, cfg)
	l.Logger.Info().Str("entrypoint", "db").Msg("entry point listening")
	l.Logger.Warn().Msg("a warning")
	l.Logger.Error().Str("client_ip", "10.0.0.1").Str("error", "max number of connections reached for 10.0.0.1").Msg("Connection rejected")
	lines := strings.Split(strings.TrimSpace(out()), "\n")
	if len(lines) != 1 {
		t.Fatalf("lines %q: want the error line only", lines)
	}
	if !commonLine.MatchString(lines[0]) || !strings.Contains(lines[0], ` ERR Connection rejected `) ||
		!strings.Contains(lines[0], ` error="max number of connections reached for 10.0.0.1"`) || !strings.Contains(lines[0], " client_ip=10.0.0.1") {
		t.Errorf("%q is not Traefik's common line", lines[0])
	}
}

// log.format common and json; the level as given, WARNING for WARN.
func TestFormatsAndLevels(t *testing.T) {
	l, out := newIn(t, &config.Log{Format: "common", Level: "INFO"})
	l.Logger.Debug().Msg("debug")
	l.Logger.Info().Str("entrypoint", "db").Msg("entry point listening")
	if got := strings.TrimSpace(out()); !commonLine.MatchString(got) || !strings.HasSuffix(got, " INF entry point listening entrypoint=db") {
		t.Errorf("common at INFO: %q", got)
	}
	l, out = newIn(t, &config.Log{Format: "json", Level: "WARNING"})
	l.Logger.Info().Msg("info")
	l.Logger.Warn().Str("entrypoint", "db").Msg("w")
	if got := strings.TrimSpace(out()); !strings.HasPrefix(got, `{"level":"warn","entrypoint":"db","time":"`) || !strings.HasSuffix(got, `"message":"w"}`) {
		t.Errorf("json at WARNING: %q", got)
	}
	for level, want := range map[string]string{"": "error", "DEBUG": "debug", "info": "info", "WARN": "warn", "ERROR": "error"} {
		if got := Level(level).String(); got != want {
			t.Errorf("Level(%q) = %s, want %s", level, got, want)
		}
	}
}

// log.maxSize, maxAge, maxBackups and compress reach lumberjack, which
// rotates the file at maxSize megabytes and gzips the old one.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Log{Format: "json", Level: "INFO", FilePath: filepath.Join(dir, "tollgate.log"), MaxSize: 1, MaxAge: 7, MaxBackups: 2, Compress: true}
	if lj := RotatingFile(cfg); lj.Filename != cfg.FilePath || lj.MaxSize != 1 || lj.MaxAge != 7 || lj.MaxBackups != 2 || !lj.Compress {
		t.Fatalf("lumberjack %+v from %+v", lj, cfg)
	}
	l, stdout := newIn(t, cfg)
	line := strings.Repeat("x", 1000)
	for range 1500 { // 1.5 MB: one rotation
		l.Logger.Info().Msg(line)
	}
	var gz []string
	deadline := time.Now().Add(10 * time.Second)
	for len(gz) == 0 && time.Now().Before(deadline) { // lumberjack compresses in the background
		gz, _ = filepath.Glob(filepath.Join(dir, "tollgate-*.log.gz"))
		time.Sleep(20 * time.Millisecond)
	}
	if len(gz) != 1 {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		t.Fatalf("files %v: want tollgate.log and one gzipped rotated file", names)
	}
	if fi, err := os.Stat(cfg.FilePath); err != nil || fi.Size() == 0 || fi.Size() > 1<<20 {
		t.Errorf("tollgate.log after the rotation: %v %v", fi, err)
	}
	if stdout() != "" {
		t.Error("a log with a file wrote to stdout")
	}
}

// Reopen: after the log file was moved away (logrotate), the next line is
// in a new file at log.filePath; the access log's File does the same.
func TestReopenAfterMove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tollgate.log")
	l, _ := newIn(t, &config.Log{Format: "common", Level: "INFO", FilePath: path})
	access, err := OpenFile("accessLog.filePath", filepath.Join(dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	l.Logger.Info().Msg("before")
	_, _ = access.Write([]byte("one\n"))
	for _, p := range []string{path, filepath.Join(dir, "access.log")} {
		if err := os.Rename(p, p+".1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := access.Reopen(); err != nil {
		t.Fatal(err)
	}
	l.Logger.Info().Msg("after")
	_, _ = access.Write([]byte("two\n"))
	for file, want := range map[string]string{path + ".1": "before", path: "after", filepath.Join(dir, "access.log.1"): "one\n", filepath.Join(dir, "access.log"): "two\n"} {
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), want) || strings.Count(string(b), "\n") != 1 {
			t.Errorf("%s: %q %v, want one line with %q", file, b, err, want)
		}
	}
	// A path that cannot be opened again: the error names it, the file open
	// until now stays.
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(dir, 0o700) }()
	_ = os.Rename(filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log.2"))
	if err := access.Reopen(); err == nil && os.Geteuid() != 0 {
		t.Error("reopening in a directory that cannot be written: no error")
	}
	if _, err := access.Write([]byte("three\n")); err != nil {
		t.Errorf("after a failed reopen, the file open until now: %v", err)
	}
}

// log.filePath that cannot be written is an error naming the option.
func TestBadLogPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing", "tollgate.log")
	if _, err := New(&config.Log{FilePath: bad}, os.Stdout); err == nil || !strings.HasPrefix(err.Error(), `log.filePath="`+bad+`": `) {
		t.Fatalf("error %v, want one naming log.filePath", err)
	}
	if _, err := OpenFile("accessLog.filePath", bad); err == nil || !strings.HasPrefix(err.Error(), `accessLog.filePath="`+bad+`": `) {
		t.Fatalf("error %v, want one naming accessLog.filePath", err)
	}
}
