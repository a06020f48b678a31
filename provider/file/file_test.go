package file

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

func TestDecodeCaseInsensitiveAndUnknownKeys(t *testing.T) {
	d, err := DecodeContent("TCP:\n  Middlewares:\n    m:\n      InFlightConn:\n        AMOUNT: 3\n        dryrun: true\n", ".yaml", "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m := d.TCP.Middlewares["m"].InFlightConn; m.Amount != 3 || !m.DryRun {
		t.Fatalf("decoded %+v", m)
	}
	_, err = DecodeContent("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amout: 3\n", ".yml", "dyn.yml")
	if err == nil || !strings.Contains(err.Error(), "amout") || !strings.Contains(err.Error(), "dyn.yml") {
		t.Fatalf("unknown key error %v must name the key and the file", err)
	}
	_, err = DecodeContent("[tcp.middlewares.m.inFlightConn]\namount = \"abc\"\n", ".toml", "dyn.toml")
	if err == nil || !strings.Contains(err.Error(), "dyn.toml") {
		t.Fatalf("bad value error %v", err)
	}
	d, err = DecodeContent("[tcp.services.s.loadBalancer]\n  [[tcp.services.s.loadBalancer.servers]]\n    address = \"127.0.0.1:1\"\n  [tcp.services.s.loadBalancer.proxyProtocol]\n", ".toml", "pp.toml")
	if err != nil {
		t.Fatal(err)
	}
	if v := d.TCP.Services["s"].LoadBalancer.ProxyProtocol.Version; v != 2 {
		t.Fatalf("empty proxyProtocol section: version %d, want the default 2", v)
	}
}

func TestDirectoryMergesAndReportsConflicts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yml", "tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 1\n")
	write("b.toml", "[tcp.middlewares.m.inFlightConn]\namount = 2\n[tcp.middlewares.n.inFlightConn]\namount = 3\n")
	write("ignored.txt", "not config")
	p := New(&config.FileProvider{Directory: dir}, zerolog.Nop())
	m := p.Load()
	if m.Err != nil {
		t.Fatal(m.Err)
	}
	mws := m.Configuration.TCP.Middlewares
	if mws["m"].InFlightConn.Amount != 1 || mws["n"].InFlightConn.Amount != 3 {
		t.Fatalf("merged %+v %+v", mws["m"], mws["n"])
	}
	if len(m.Problems) != 1 || !strings.Contains(m.Problems[0], "a.yml") || !strings.Contains(m.Problems[0], "b.toml") {
		t.Fatalf("problems %q: want one naming both files", m.Problems)
	}
}

func TestWatchAndReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dyn.yml")
	write := func(amount string) {
		tmp := filepath.Join(dir, ".tmp")
		_ = os.WriteFile(tmp, []byte("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: "+amount+"\n"), 0o644)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	p := New(&config.FileProvider{Filename: path, Watch: true}, zerolog.Nop())
	out := make(chan provider.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx, out) }()
	next := func(want int64) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case m := <-out:
				if m.Err == nil && m.Configuration.TCP != nil && m.Configuration.TCP.Middlewares["m"] != nil &&
					m.Configuration.TCP.Middlewares["m"].InFlightConn.Amount == want {
					return
				}
			case <-deadline:
				t.Fatalf("no message with amount %d", want)
			}
		}
	}
	next(1)
	write("2") // fsnotify (rename into place, as editors do)
	next(2)
	_ = os.WriteFile(path, []byte("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 3\n"), 0o644)
	p.Reload() // SIGHUP path
	next(3)
}

func FuzzDecodeContent(f *testing.F) {
	f.Add("tcp:\n  routers:\n    r:\n      rule: \"HostSNI(`*`)\"\n", ".yml")
	f.Add("[tcp.middlewares.m.inFlightConn]\namount = 10\n", ".toml")
	f.Add("tcp: [1, 2]\n", ".yml")
	f.Add("tcp:\n  services:\n    s:\n      loadBalancer:\n        servers: {a: 1}\n", ".yml")
	f.Fuzz(func(t *testing.T, content, ext string) {
		if ext != ".yml" && ext != ".toml" {
			ext = ".yml"
		}
		d, err := DecodeContent(content, ext, "fuzz"+ext)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz"+ext) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if d == nil {
			t.Fatal("nil config without error")
		}
	})
}
