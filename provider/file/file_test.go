package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	p := mustNew(t, &config.FileProvider{Directory: dir}, provider.Options{})
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
	p := mustNew(t, &config.FileProvider{Filename: path, Watch: true}, provider.Options{})
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
	f.Add("http:\n  routers: {}\nudp: 1\ntcp: {}\n", ".yml")
	f.Add("[http.routers.r]\nrule = 1\n[udp]\n", ".toml")
	f.Fuzz(func(t *testing.T, content, ext string) {
		if ext != ".yml" && ext != ".toml" {
			ext = ".yml"
		}
		// The sections tollgate does not read are found in any text, each
		// once, in line order.
		ignored := IgnoredSections(content, ext)
		for i, ig := range ignored {
			if s := strings.ToLower(ig.Section); s != "http" && s != "udp" || ig.Line < 1 || i > 0 && ig.Line < ignored[i-1].Line {
				t.Fatalf("ignored sections %+v", ignored)
			}
		}
		if len(ignored) > 2 {
			t.Fatalf("ignored sections %+v", ignored)
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

// nextMessage returns the next message from out, or fails after within.
func nextMessage(t *testing.T, out <-chan provider.Message, within time.Duration) provider.Message {
	t.Helper()
	select {
	case m := <-out:
		return m
	case <-time.After(within):
		t.Fatalf("no message within %v", within)
	}
	return provider.Message{}
}

func amountOf(m provider.Message) int64 {
	if m.Configuration == nil || m.Configuration.TCP == nil || m.Configuration.TCP.Middlewares["m"] == nil {
		return -1
	}
	return m.Configuration.TCP.Middlewares["m"].InFlightConn.Amount
}

// Issue 10.2: a file rewritten in place with a pause mid-write is read only
// after its writer closes it, never half-written; then it applies at once.
func TestInPlaceWriteReadAfterClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dyn.yml")
	content := func(amount string) string {
		return "tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: " + amount + "\n"
	}
	if err := os.WriteFile(path, []byte(content("10")), 0o644); err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, &config.FileProvider{Filename: path, Watch: true}, provider.Options{})
	out := make(chan provider.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx, out) }()
	if m := nextMessage(t, out, 5*time.Second); amountOf(m) != 10 {
		t.Fatalf("first message amount %d, want 10", amountOf(m))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	full := content("25")
	cut := strings.Index(full, "25") + 1 // "amount: 2": a valid, wrong configuration
	if _, err := f.WriteString(full[:cut]); err != nil {
		t.Fatal(err)
	}
	// The writer pauses mid-write: nothing may be read meanwhile.
	select {
	case m := <-out:
		t.Fatalf("read while the writer held the file half-written: amount %d, err %v", amountOf(m), m.Err)
	case <-time.After(2 * time.Second):
	}
	if _, err := f.WriteString(full[cut:]); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m := nextMessage(t, out, 5*time.Second)
	if amountOf(m) != 25 {
		t.Fatalf("after the writer closed: amount %d (err %v), want 25", amountOf(m), m.Err)
	}
	if d := time.Since(closed); d > time.Second {
		t.Fatalf("read %v after the writer closed, want at once", d)
	}
}

// Issue 10.2: an emptied file (`: > dyn.yml`), or one left with nothing but
// comments, is not applied: the last configuration keeps serving and a
// problem names the file. A file that is empty from the start serves nothing
// and says so.
func TestEmptiedFileKeepsLastConfiguration(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dyn.yml")
	if err := os.WriteFile(path, []byte("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, &config.FileProvider{Filename: path, Watch: true}, provider.Options{})
	out := make(chan provider.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx, out) }()
	if m := nextMessage(t, out, 5*time.Second); amountOf(m) != 7 {
		t.Fatalf("first message amount %d, want 7", amountOf(m))
	}
	for _, empty := range []string{"", "# nothing here yet\n"} {
		if err := os.WriteFile(path, []byte(empty), 0o644); err != nil {
			t.Fatal(err)
		}
		m := nextMessage(t, out, 5*time.Second)
		if m.Err != nil || amountOf(m) != 7 {
			t.Fatalf("file %q: amount %d, err %v; want the last configuration (7)", empty, amountOf(m), m.Err)
		}
		if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], path) || !strings.Contains(m.Warnings[0], "keeping its last configuration") || len(m.Problems) != 0 {
			t.Fatalf("file %q: warnings %q, problems %q; want one warning naming the file and what is kept", empty, m.Warnings, m.Problems)
		}
	}

	fresh := filepath.Join(dir, "fresh.yml")
	if err := os.WriteFile(fresh, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, &config.FileProvider{Filename: fresh}, provider.Options{}).Load()
	if m.Err != nil || !isEmpty(m.Configuration) || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "nothing from it is served") {
		t.Fatalf("empty from the start: %+v", m)
	}
}

// In a directory, an emptied file keeps its own last configuration; a
// removed file takes its configuration with it.
func TestDirectoryEmptiedAndRemovedFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yml")
	_ = os.WriteFile(a, []byte("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 1\n"), 0o644)
	_ = os.WriteFile(b, []byte("tcp:\n  middlewares:\n    n:\n      inFlightConn:\n        amount: 2\n"), 0o644)
	p := mustNew(t, &config.FileProvider{Directory: dir}, provider.Options{})
	if m := p.Load(); m.Err != nil || len(m.Configuration.TCP.Middlewares) != 2 {
		t.Fatalf("%+v", m)
	}
	_ = os.WriteFile(a, nil, 0o644)
	m := p.Load()
	if m.Err != nil || len(m.Configuration.TCP.Middlewares) != 2 || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], a) {
		t.Fatalf("emptied a.yml: middlewares %v, warnings %q", m.Configuration.TCP.Middlewares, m.Warnings)
	}
	_ = os.Remove(a)
	m = p.Load()
	if m.Err != nil || len(m.Configuration.TCP.Middlewares) != 1 || m.Configuration.TCP.Middlewares["n"] == nil || len(m.Warnings) != 0 {
		t.Fatalf("removed a.yml: middlewares %v, warnings %q", m.Configuration.TCP.Middlewares, m.Warnings)
	}
}

// A file that does not decode is reported with its line and key, as the
// log and /api/providers show it at run time, and a value that does not
// parse says what was expected instead of quoting strconv.
func TestDecodeErrorNamesFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		line          int
		want          string
	}{
		{"dyn.yml", "tcp:\n  middlewares:\n    limit:\n      inFlightConn:\n        amount: ten\n", 5,
			`file "dyn.yml", line 5: tcp.middlewares.limit.inFlightConn.amount: amount must be an integer, got "ten"`},
		{"dyn.toml", "[tcp.middlewares.limit.inFlightConn]\n  amount = \"ten\"\n", 2,
			`file "dyn.toml", line 2: tcp.middlewares.limit.inFlightConn.amount: amount must be an integer, got "ten"`},
		{"typo.yml", "tcp:\n  routers:\n    db:\n      rule: \"HostSNI(`*`)\"\n      servce: db\n", 5,
			`file "typo.yml", line 5: tcp.routers.db.servce: unknown key "servce"`},
		{"typo.toml", "[tcp.routers.db]\n  rule = \"HostSNI(`*`)\"\n  servce = \"db\"\n", 3,
			`file "typo.toml", line 3: tcp.routers.db.servce: unknown key "servce"`},
		{"hc.yml", "tcp:\n  services:\n    s:\n      loadBalancer:\n        terminationDelay: soon\n", 5,
			`file "hc.yml", line 5: tcp.services.s.loadBalancer.terminationDelay: terminationDelay must be an integer, got "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			m := mustNew(t, &config.FileProvider{Filename: path}, provider.Options{}).Load()
			var de *DecodeError
			if !errors.As(m.Err, &de) || de.Line != tc.line {
				t.Fatalf("Load: error %v, want a DecodeError on line %d", m.Err, tc.line)
			}
			if want := strings.Replace(tc.want, tc.name, path, 1); m.Err.Error() != want {
				t.Fatalf("error\n  %s\nwant\n  %s", m.Err, want)
			}
		})
	}
}

// rateLimit in YAML and TOML: a period as a duration or a number of seconds,
// burst and period left out when not written (the middleware's defaults).
func TestDecodeRateLimit(t *testing.T) {
	for _, tc := range []struct{ content, ext, period string }{
		{"tcp:\n  middlewares:\n    m:\n      rateLimit:\n        average: 100\n        period: 1m\n        burst: 50\n", ".yml", "1m0s"},
		{"[tcp.middlewares.m.rateLimit]\n  average = 100\n  period = \"1m\"\n  burst = 50\n", ".toml", "1m0s"},
		{"[tcp.middlewares.m.rateLimit]\n  average = 100\n  period = 10\n  burst = 50\n", ".toml", "10s"},
	} {
		d, err := DecodeContent(tc.content, tc.ext, "dyn"+tc.ext)
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		rl := d.TCP.Middlewares["m"].RateLimit
		if rl == nil || rl.Average != 100 || rl.Period == nil || rl.Period.String() != tc.period || rl.Burst == nil || *rl.Burst != 50 {
			t.Fatalf("%q: rateLimit %+v, want average 100 per %s, burst 50", tc.content, rl, tc.period)
		}
	}
	d, err := DecodeContent("tcp:\n  middlewares:\n    m:\n      rateLimit:\n        average: 5\n", ".yml", "dyn.yml")
	if err != nil {
		t.Fatal(err)
	}
	if rl := d.TCP.Middlewares["m"].RateLimit; rl.Period != nil || rl.Burst != nil {
		t.Fatalf("unwritten period and burst decoded as %v, %v; want nil (the middleware's defaults, 1s and 1)", rl.Period, rl.Burst)
	}
}

// inFlightConn's store and failureMode decode from YAML and TOML alike
// (docs/operations/replicas.md); what they mean is the middleware's.
func TestDecodeSharedStore(t *testing.T) {
	for _, in := range []struct{ content, ext string }{
		{"tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 10\n        store: shared\n        failureMode: open\n", ".yaml"},
		{"[tcp.middlewares.m.inFlightConn]\namount = 10\nstore = \"shared\"\nfailureMode = \"open\"\n", ".toml"},
	} {
		d, err := DecodeContent(in.content, in.ext, "dyn"+in.ext)
		if err != nil {
			t.Fatal(err)
		}
		if m := d.TCP.Middlewares["m"].InFlightConn; m.Amount != 10 || m.Store != "shared" || m.FailureMode != "open" {
			t.Fatalf("%s decoded %+v", in.ext, m)
		}
	}
}

// A Traefik file's http and udp sections are not read (tollgate routes TCP
// only), as the KV provider says of <root>/http and <root>/udp: its tcp
// section applies, with a warning per section that names the file and line.
// A file with nothing but those sections is written as meant, not caught
// half-written: it applies, serving nothing from it, instead of keeping the
// file's last configuration as an emptied file does.
func TestHTTPAndUDPSectionsAreIgnoredWithAWarning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "traefik.yml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const httpPart = "http:\n  routers:\n    web:\n      rule: Host(`a`)\n      service: web\n  services:\n    web:\n      loadBalancer:\n        servers:\n          - url: http://127.0.0.1:80\n"
	const udpPart = "UDP:\n  services:\n    dns:\n      loadBalancer:\n        servers:\n          - address: 127.0.0.1:53\n"
	const tcpPart = "tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 7\n"
	write(httpPart + tcpPart + udpPart)
	p := mustNew(t, &config.FileProvider{Filename: path}, provider.Options{})
	m := p.Load()
	want := []string{
		fmt.Sprintf("file %q, line 1: tollgate routes TCP only: the http section is ignored", path),
		fmt.Sprintf("file %q, line 16: tollgate routes TCP only: the udp section is ignored", path),
	}
	if m.Err != nil || amountOf(m) != 7 || !slices.Equal(m.Warnings, want) || len(m.Problems) != 0 {
		t.Fatalf("amount %d, err %v, warnings %q, problems %q; want 7 and warnings %q", amountOf(m), m.Err, m.Warnings, m.Problems, want)
	}

	write(httpPart)
	m = p.Load()
	if m.Err != nil || !isEmpty(m.Configuration) || len(m.Warnings) != 2 ||
		!strings.HasSuffix(m.Warnings[1], "has no tcp or tls configuration: nothing from it is served") {
		t.Fatalf("http only: err %v, configuration %+v, warnings %q; want nothing served, said", m.Err, m.Configuration, m.Warnings)
	}

	toml := filepath.Join(dir, "traefik.toml")
	if err := os.WriteFile(toml, []byte("[tcp.middlewares.m.inFlightConn]\n  amount = 3\n\n[http.routers.web]\n  rule = \"Host(`a`)\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m = mustNew(t, &config.FileProvider{Filename: toml}, provider.Options{}).Load()
	want = []string{fmt.Sprintf("file %q, line 4: tollgate routes TCP only: the http section is ignored", toml)}
	if m.Err != nil || amountOf(m) != 3 || !slices.Equal(m.Warnings, want) {
		t.Fatalf("TOML: amount %d, err %v, warnings %q; want 3 and %q", amountOf(m), m.Err, m.Warnings, want)
	}
}

// In a directory, a file that does not render (here over its template's
// budget) or decode keeps its own last good configuration, with a problem
// naming it; the other files apply, edits included. A file that never
// rendered serves nothing.
func TestDirectoryBadFileKeepsItsLastGood(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.yml")
	mw := func(name string, amount int) []byte {
		return fmt.Appendf(nil, "tcp:\n  middlewares:\n    %s:\n      inFlightConn:\n        amount: %d\n", name, amount)
	}
	writeFile(t, a, mw("m", 1))
	writeFile(t, b, mw("n", 2))
	p := mustNew(t, &config.FileProvider{Directory: dir}, provider.Options{})
	if m := p.Load(); m.Err != nil || len(m.Configuration.TCP.Middlewares) != 2 {
		t.Fatalf("%+v", m)
	}
	hostile := "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}\n"
	writeFile(t, b, append([]byte(hostile), mw("n", 5)...))
	writeFile(t, c, []byte(hostile))
	writeFile(t, a, mw("m", 3))
	m := p.Load()
	mws := m.Configuration.TCP.Middlewares
	if m.Err != nil || len(mws) != 2 || mws["m"].InFlightConn.Amount != 3 || mws["n"].InFlightConn.Amount != 2 {
		t.Fatalf("err %v, middlewares %v: want a.yml's edit (3) and b.yml's last good (2)", m.Err, mws)
	}
	if len(m.Problems) != 2 ||
		!strings.Contains(m.Problems[0], b) || !strings.Contains(m.Problems[0], "rendering stopped: more than 1000000 steps") || !strings.Contains(m.Problems[0], "keeping this file's last good configuration") ||
		!strings.Contains(m.Problems[1], c) || !strings.Contains(m.Problems[1], "nothing from this file is served") {
		t.Fatalf("problems %q", m.Problems)
	}
	writeFile(t, b, mw("n", 4))
	_ = os.Remove(c)
	if m := p.Load(); m.Err != nil || len(m.Problems) != 0 || m.Configuration.TCP.Middlewares["n"].InFlightConn.Amount != 4 {
		t.Fatalf("fixed: err %v, problems %q, middlewares %v", m.Err, m.Problems, m.Configuration.TCP.Middlewares)
	}
}

// A FIFO with a configuration file's name is a problem of its own, not a
// read that waits for a writer and holds every other file's reload.
func TestDirectoryFIFOIsNotRead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yml"), []byte("tcp:\n  middlewares:\n    m:\n      inFlightConn:\n        amount: 1\n"))
	fifo := filepath.Join(dir, "b.yml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, &config.FileProvider{Directory: dir}, provider.Options{}).Load()
	if m.Err != nil || m.Configuration.TCP.Middlewares["m"] == nil || len(m.Problems) != 1 ||
		!strings.Contains(m.Problems[0], fifo) || !strings.Contains(m.Problems[0], "not a regular file") {
		t.Fatalf("err %v, middlewares %v, problems %q", m.Err, m.Configuration.TCP.Middlewares, m.Problems)
	}
}

// mustNew is New for a configuration the test knows to be right.
func mustNew(t testing.TB, cfg *config.FileProvider, po provider.Options) *Provider {
	t.Helper()
	p, err := New(cfg, po)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A reload shares with the last configuration the routers, services and
// middlewares that did not change (the one serving and the one compiled
// beside it hold them once), and decodes the changed ones anew: what it
// sends is what a first read of the file sends.
func TestReloadSharesUnchangedResources(t *testing.T) {
	for _, dirMode := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "dyn.yml")
		write := func(addr string) {
			content := "tcp:\n  routers:\n    a:\n      rule: \"HostSNI(`*`)\"\n      service: s\n      middlewares: [m]\n    b:\n      rule: \"HostSNI(`*`)\"\n      service: t\n" +
				"  services:\n    s:\n      loadBalancer:\n        servers:\n          - address: 127.0.0.1:1\n    t:\n      loadBalancer:\n        servers:\n          - address: " + addr + "\n" +
				"  middlewares:\n    m:\n      inFlightConn:\n        amount: 3\n"
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cfg := &config.FileProvider{Filename: path}
		if dirMode {
			cfg = &config.FileProvider{Directory: dir}
		}
		p := mustNew(t, cfg, provider.Options{})
		write("127.0.0.1:2")
		first := p.Load()
		write("127.0.0.1:3")
		second := p.Load()
		fresh := mustNew(t, cfg, provider.Options{}).Load()
		if first.Err != nil || second.Err != nil || fresh.Err != nil {
			t.Fatal(first.Err, second.Err, fresh.Err)
		}
		a, b := first.Configuration.TCP, second.Configuration.TCP
		if a.Routers["a"] != b.Routers["a"] || a.Routers["b"] != b.Routers["b"] || a.Services["s"] != b.Services["s"] || a.Middlewares["m"] != b.Middlewares["m"] {
			t.Errorf("directory %v: unchanged resources not shared with the last configuration", dirMode)
		}
		if a.Services["t"] == b.Services["t"] || b.Services["t"].LoadBalancer.Servers[0].Address != "127.0.0.1:3" {
			t.Errorf("directory %v: changed service %+v, want a new one with the new address", dirMode, b.Services["t"].LoadBalancer)
		}
		if !reflect.DeepEqual(second.Configuration, fresh.Configuration) {
			t.Errorf("directory %v: the reload sends %+v, a first read %+v", dirMode, second.Configuration.TCP, fresh.Configuration.TCP)
		}
	}
}
