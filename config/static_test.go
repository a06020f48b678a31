package config

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/traefik/paerser/file"
	"github.com/traefik/paerser/flag"
)

func TestAPIIsOptIn(t *testing.T) {
	if NewCommand().API != nil {
		t.Fatal("the admin API must be off unless asked for")
	}
	for args, want := range map[string]string{
		"--api":                        DefaultAPIAddress,
		"--api.address=127.0.0.1:9000": "127.0.0.1:9000",
	} {
		c := NewCommand()
		if err := flag.Decode(strings.Fields(args), c); err != nil {
			t.Fatal(err)
		}
		if c.API == nil || c.API.Address != want {
			t.Fatalf("%s: API %+v, want address %s", args, c.API, want)
		}
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		want string
	}{
		{":99999", `entryPoints.db.address=":99999"`},
		{"db:5432", `host "db" is not an IP address`},
		{"5432", `entryPoints.db.address="5432"`},
	} {
		c := NewCommand()
		c.EntryPoints = map[string]*EntryPoint{"db": {Address: tc.ep}}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("address %q: error %v, want it to contain %s", tc.ep, err, tc.want)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":            "10.0.0.1/32",
		"10.1.2.3/8":          "10.0.0.0/8",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::1":                 "::1/128",
	} {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	if _, err := ParsePrefix("10.0.0.0/33"); err == nil || !strings.Contains(err.Error(), `"10.0.0.0/33"`) {
		t.Errorf("bad CIDR error %v must name the input", err)
	}
}

// Issue 10.6: suspicious but valid ranges parse as they have always parsed,
// with a note saying what they really mean.
func TestParsePrefixNote(t *testing.T) {
	for _, tc := range []struct{ in, want, note string }{
		{"10.0.0.0/8", "10.0.0.0/8", ""},
		{"192.0.2.7", "192.0.2.7/32", ""},
		{"2001:db8::/32", "2001:db8::/32", ""},
		{"::/0", "::/0", ""},
		{"127.0.0.9/8", "127.0.0.0/8", `"127.0.0.9/8" has host bits set: it means 127.0.0.0/8`},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", "IPv4-mapped IPv6 range: clients are matched as IPv4, so it means 10.0.0.0/8"},
		{"::ffff:0:0/96", "0.0.0.0/0", "every IPv4 address"},
		{"::ffff:10.1.2.3/104", "10.0.0.0/8", "host bits set"},
		{"::ffff:1.2.3.4", "1.2.3.4/32", "IPv4-mapped IPv6 address"},
		{"::ffff:0:0/80", "::/80", "never matches"},
	} {
		p, note, err := ParsePrefixNote(tc.in)
		if err != nil || p.String() != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("ParsePrefixNote(%q) = %v, %q, %v; want %s with a note containing %q", tc.in, p, note, err, tc.want, tc.note)
		}
	}
}

// Traefik's api.insecure serves the API on the entry point named traefik
// (which then proxies nothing), else on :8080; an api.address given wins.
func TestAPIInsecure(t *testing.T) {
	for _, tc := range []struct {
		args     string
		wantAddr string
		wantEPs  int
	}{
		{"--entryPoints.db.address=:5432 --api.insecure=true", ":8080", 1},
		{"--entryPoints.db.address=:5432 --entryPoints.traefik.address=:9000 --api.insecure=true", ":9000", 1},
		{"--entryPoints.db.address=:5432 --entryPoints.traefik.address=:9000 --api.insecure=true --api.address=127.0.0.1:9100", "127.0.0.1:9100", 2},
		{"--entryPoints.db.address=:5432 --entryPoints.traefik.address=:9000 --api", DefaultAPIAddress, 2},
	} {
		c := NewCommand()
		if err := flag.Decode(strings.Fields(tc.args), c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		if c.API.Address != tc.wantAddr || len(c.EntryPoints) != tc.wantEPs {
			t.Errorf("%s: API on %s with %d entry points, want %s and %d", tc.args, c.API.Address, len(c.EntryPoints), tc.wantAddr, tc.wantEPs)
		}
	}
	c := NewCommand()
	_ = flag.Decode(strings.Fields("--entryPoints.traefik.address=:9000 --api.insecure=true"), c)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "no entry point") {
		t.Errorf("only the traefik entry point: %v, want no entry point left to proxy on", err)
	}
}

// The Traefik static options a TCP setup commonly carries decode, and an
// access log format Traefik does not know is an error naming it.
func TestTraefikStaticOptionsDecode(t *testing.T) {
	c := NewCommand()
	args := "--entryPoints.db.address=:5432 --global.checkNewVersion=false --global.sendAnonymousUsage=false --api.dashboard=true --api.debug=true --ping --ping.entryPoint=traefik --log.filePath=/tmp/x.log --log.noColor=true --accessLog.format=common --core.defaultRuleSyntax=v2 --entryPoints.db.forwardedHeaders.insecure=true --entryPoints.db.transport.respondingTimeouts.idleTimeout=10s --entryPoints.db.transport.respondingTimeouts.writeTimeout=5s"
	if err := flag.Decode(strings.Fields(args), c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Global == nil || c.Ping == nil || !c.API.Dashboard || c.Log.FilePath != "/tmp/x.log" || !c.Log.NoColor || c.AccessLog.Format != "common" {
		t.Fatalf("decoded %+v %+v %+v %+v %+v", c.Global, c.Ping, c.API, c.Log, c.AccessLog)
	}
	c = NewCommand()
	_ = flag.Decode(strings.Fields("--entryPoints.db.address=:5432 --core.defaultRuleSyntax=v1"), c)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `core.defaultRuleSyntax="v1"`) {
		t.Errorf("core.defaultRuleSyntax=v1: %v", err)
	}
	c = NewCommand()
	_ = flag.Decode(strings.Fields("--entryPoints.db.address=:5432 --accessLog.format=xml"), c)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `accessLog.format="xml"`) {
		t.Errorf("accessLog.format=xml: %v", err)
	}
}

// A Traefik static file with HTTP settings (entry points' http, http2 and
// http3, metrics labels and buckets, access log fields and filters) and a
// UDP entry point decodes and validates: the UDP entry point is left out,
// "/tcp" is cut off an address, and an access log field mode that is not
// keep, drop or redact is refused naming it.
func TestTraefikStaticFileWithHTTPSettings(t *testing.T) {
	const traefikYML = `
accessLog:
  bufferingSize: 100
  fields:
    defaultMode: keep
    names:
      ClientHost: drop
    headers:
      defaultMode: drop
  filters:
    statusCodes: ["400-499"]
    minDuration: 10ms
metrics:
  prometheus:
    addEntryPointsLabels: true
    addRoutersLabels: true
    addServicesLabels: true
    buckets: [0.1, 0.3, 1.2, 5.0]
entryPoints:
  web:
    address: ":80"
    http:
      redirections:
        entryPoint:
          to: websecure
  websecure:
    address: ":443/tcp"
    http:
      middlewares: [secure@file]
      tls:
        certResolver: le
        domains:
          - main: example.com
    http2:
      maxConcurrentStreams: 250
    http3:
      advertisedPort: 443
  dns:
    address: ":53/udp"
    udp:
      timeout: 10s
`
	c := NewCommand()
	if err := file.DecodeContent(traefikYML, ".yml", c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.EntryPoints["dns"]; ok || len(c.EntryPoints) != 2 || c.EntryPoints["websecure"].Address != ":443" {
		t.Errorf("entry points %v, websecure %q: want web and websecure, :443", c.EntryPoints, c.EntryPoints["websecure"].Address)
	}
	if r := c.EntryPoints["web"].Redirect(); r == nil || *r != (Redirect{Scheme: "https", Port: 0, Permanent: true}) {
		t.Errorf("web's redirection %+v, want https on the default port, permanent (Traefik's default)", r)
	}
	if r := c.EntryPoints["websecure"].Redirect(); r != nil {
		t.Errorf("websecure redirects: %+v", r)
	}
	if got := c.UDPEntryPoints(); len(got) != 1 || got[0] != "dns" {
		t.Errorf("UDP entry points %v, want [dns]", got)
	}
	if f := c.AccessLog.Fields; f == nil || f.Names["ClientHost"] != "drop" || time.Duration(c.AccessLog.Filters.MinDuration) != 10*time.Millisecond {
		t.Errorf("access log %+v", c.AccessLog)
	}

	c = NewCommand()
	_ = file.DecodeContent(traefikYML, ".yml", c)
	c.AccessLog.Fields.Names["ClientHost"] = "hide"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `accessLog.fields.names.ClientHost="hide"`) {
		t.Errorf("mode hide: %v", err)
	}
	for to, want := range map[string]string{"nowhere": `entryPoints.web.http.redirections.entryPoint.to="nowhere": neither an entry point nor a port`, ":8443": ""} {
		c = NewCommand()
		_ = file.DecodeContent(traefikYML, ".yml", c)
		c.EntryPoints["web"].HTTP.Redirections.EntryPoint.To = to
		err := c.Validate()
		if want == "" && (err != nil || c.EntryPoints["web"].Redirect().Port != 8443) || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("to %q: %v, want %q", to, err, want)
		}
	}
	c = NewCommand()
	c.EntryPoints = map[string]*EntryPoint{"dns": {Address: ":53/udp"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "no TCP entry point: entryPoints dns") {
		t.Errorf("UDP alone: %v", err)
	}
}

// ping.entryPoint and metrics.prometheus.entryPoint (traefik by default)
// make the entry point they name internal: its address serves /ping or
// /metrics, and it is no proxy entry point; api.insecure takes traefik
// first, and metrics with an address keep it.
func TestInternalEntryPoints(t *testing.T) {
	for _, tc := range []struct {
		args                string
		metrics, ping, rest string
		pingAddr, internal  string
	}{
		// Traefik's Helm chart.
		{"--entryPoints.traefik.address=:8080/tcp --entryPoints.metrics.address=:9100/tcp --entryPoints.web.address=:8000/tcp --ping --metrics.prometheus --metrics.prometheus.entryPoint=metrics --api.dashboard",
			":9100", ":8080", "web", ":8080", "metrics traefik"},
		// Both on traefik by default: the metrics listener answers /ping.
		{"--entryPoints.traefik.address=:8080 --entryPoints.db.address=:5432 --ping --metrics.prometheus",
			":8080", ":8080", "db", ":8080", "traefik"},
		// No such entry point: /ping where Traefik creates it, :8080 on
		// every interface (was 127.0.0.1:8080: issue 42).
		{"--entryPoints.db.address=:5432 --ping", "", "", "db", DefaultInternalAddress, ""},
		// manualRouting: the traefik entry point stays a proxy entry point.
		{"--entryPoints.traefik.address=:8081 --entryPoints.db.address=:5432 --ping.manualRouting --metrics.prometheus.manualRouting",
			"", "", "db traefik", DefaultInternalAddress, ""},
		// api.insecure takes traefik first: /ping and /metrics with the API.
		{"--entryPoints.traefik.address=:8081 --entryPoints.db.address=:5432 --ping --api.insecure --metrics.prometheus",
			"", "", "db", ":8081", ""},
		// Metrics with an address of their own keep it; ping takes traefik.
		{"--entryPoints.traefik.address=:8081 --entryPoints.db.address=:5432 --ping --metrics.prometheus.address=127.0.0.1:9100",
			"127.0.0.1:9100", ":8081", "db", ":8081", "traefik"},
	} {
		c := NewCommand()
		if err := flag.Decode(strings.Fields(tc.args), c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		metrics := ""
		if c.Metrics != nil && c.Metrics.Prometheus != nil {
			metrics = c.Metrics.Prometheus.Address
		}
		var eps []string
		for n := range c.EntryPoints {
			eps = append(eps, n)
		}
		sort.Strings(eps)
		if metrics != tc.metrics || c.Ping.Address() != tc.ping || strings.Join(eps, " ") != tc.rest ||
			c.PingAddress() != tc.pingAddr || strings.Join(c.InternalEntryPoints(), " ") != tc.internal {
			t.Errorf("%s:\nmetrics %q ping %q entry points %v ping address %q internal %v\nwant %q %q %q %q %q",
				tc.args, metrics, c.Ping.Address(), eps, c.PingAddress(), c.InternalEntryPoints(), tc.metrics, tc.ping, tc.rest, tc.pingAddr, tc.internal)
		}
	}
}

// Issue 41.5 and 41.6: an entry point's bounds before routing and on full
// TLS handshakes decode from flags with their defaults filled in around
// what is set, and a value out of range is refused naming the option.
func TestEntryPointBoundsDecode(t *testing.T) {
	c := NewCommand()
	args := "--entryPoints.db.address=:5432 --entryPoints.db.transport.maxUnrouted=500 --entryPoints.db.transport.ipv6Subnet=48 --entryPoints.db.transport.tlsHandshakeRate.average=20"
	if err := flag.Decode(strings.Fields(args), c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := c.EntryPoints["db"].Transport
	if tr.MaxUnrouted == nil || *tr.MaxUnrouted != 500 || tr.IPv6Subnet != 48 || tr.MaxUnroutedPerIP != DefaultMaxUnroutedPerIP {
		t.Fatalf("transport %+v, want maxUnrouted 500, ipv6Subnet 48 and the default per-IP bound", tr)
	}
	if r := tr.TLSHandshakeRate; r == nil || r.Average != 20 || r.Burst != DefaultTLSHandshakeBurst || r.Period != Duration(time.Second) {
		t.Fatalf("tlsHandshakeRate %+v, want average 20 and the default burst and period", r)
	}
	c = NewCommand()
	if err := flag.Decode(strings.Fields("--entryPoints.db.address=:5432"), c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tr = c.EntryPoints["db"].Transport
	if tr.MaxUnrouted != nil || tr.IPv6Subnet != DefaultIPv6Subnet || tr.TLSHandshakeRate == nil || tr.TLSHandshakeRate.Average != DefaultTLSHandshakeAverage {
		t.Fatalf("default transport %+v (rate %+v), want no maxUnrouted (the descriptor limit's quarter), ipv6Subnet 64, 200 handshakes a second", tr, tr.TLSHandshakeRate)
	}
	for _, tc := range []struct{ arg, want string }{
		{"transport.maxUnrouted=-1", "entryPoints.db.transport.maxUnrouted=-1: must not be negative"},
		{"transport.ipv6Subnet=129", "entryPoints.db.transport.ipv6Subnet=129: must be a prefix length from 0 to 128"},
		{"transport.tlsHandshakeRate.average=-5", "entryPoints.db.transport.tlsHandshakeRate.average=-5: must not be negative"},
		{"transport.tlsHandshakeRate.burst=0", "entryPoints.db.transport.tlsHandshakeRate.burst=0: must be at least 1"},
		{"transport.tlsHandshakeRate.period=0s", "entryPoints.db.transport.tlsHandshakeRate.period=0s: must be longer than 0"},
	} {
		c := NewCommand()
		if err := flag.Decode([]string{"--entryPoints.db.address=:5432", "--entryPoints.db." + tc.arg}, c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.arg, err, tc.want)
		}
	}
}

// api.allowedHosts takes host names (or "*.suffix", or IPs), from flags;
// anything with a scheme, a port or a path is an error naming the option.
func TestAPIAllowedHosts(t *testing.T) {
	for args, wantErr := range map[string]string{
		"--api.allowedHosts=tollgate.internal,*.corp.example,10.0.0.5": "",
		"--api.allowedHosts=http://tollgate.internal":                  `api.allowedHosts: "http://tollgate.internal": not a host name`,
		"--api.allowedHosts=tollgate.internal:8080":                    `api.allowedHosts: "tollgate.internal:8080"`,
		"--api.allowedHosts=a..b":                                      `api.allowedHosts: "a..b"`,
	} {
		c := NewCommand()
		if err := flag.Decode(append(strings.Fields(args), "--entryPoints.db.address=:5432"), c); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", args, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: %v, want an error saying %s", args, err, wantErr)
		}
		if wantErr == "" && len(c.API.AllowedHosts) != 3 {
			t.Errorf("%s: decoded %q", args, c.API.AllowedHosts)
		}
	}
}

// api.upgradeTokenFile: the token is the file's one line; a missing file,
// a short token or one of several words is an error naming the option and
// never saying what the file holds.
func TestAPIUpgradeToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := (&API{}).UpgradeToken(); tok != "" || err != nil {
		t.Fatalf("without the option: %q %v, want none", tok, err)
	}
	if tok, err := (&API{UpgradeTokenFile: write("ok", "  s3cret-token-of-32-characters!!\n")}).UpgradeToken(); tok != "s3cret-token-of-32-characters!!" || err != nil {
		t.Fatalf("a token file: %q %v", tok, err)
	}
	for name, content := range map[string]string{"short": "SHORTSECRET\n", "words": "TWO-WORDS-OF-SECRET TOKEN-TEXT\n", "missing": ""} {
		path := filepath.Join(dir, name)
		if name != "missing" {
			path = write(name, content)
		}
		_, err := (&API{UpgradeTokenFile: path}).UpgradeToken()
		if err == nil || !strings.Contains(err.Error(), `api.upgradeTokenFile="`+path+`"`) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v, want an error naming the option and not the content", name, err)
		}
	}
	c := NewCommand()
	if err := flag.Decode([]string{"--entryPoints.db.address=:5432", "--api.upgradeTokenFile=" + filepath.Join(dir, "missing")}, c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "api.upgradeTokenFile") {
		t.Fatalf("Validate with a missing token file: %v", err)
	}
}

// TestAPIDashboardDefault: the dashboard comes with the API, as in
// Traefik, from flags and from a file, and api.dashboard=false turns it off.
func TestAPIDashboardDefault(t *testing.T) {
	for args, want := range map[string]bool{
		"--api":                                     true,
		"--api.insecure":                            true,
		"--api.address=127.0.0.1:9000":              true,
		"--api --api.dashboard=false":               false,
		"--api.dashboard=false --api.insecure=true": false,
	} {
		c := NewCommand()
		if err := flag.Decode(strings.Fields(args), c); err != nil {
			t.Fatal(err)
		}
		if c.API == nil || c.API.Dashboard != want {
			t.Errorf("%s: API %+v, want dashboard %v", args, c.API, want)
		}
	}
	for content, want := range map[string]bool{
		"api: {}\n":                    true,
		"api:\n  insecure: true\n":     true,
		"api:\n  dashboard: false\n":   false,
		"[api]\n":                      true,
		"[api]\n  dashboard = false\n": false,
	} {
		name := "static.yaml"
		if strings.HasPrefix(content, "[") {
			name = "static.toml"
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c := NewCommand()
		if err := file.Decode(path, c); err != nil {
			t.Fatal(err)
		}
		if c.API == nil || c.API.Dashboard != want {
			t.Errorf("%q: API %+v, want dashboard %v", content, c.API, want)
		}
	}
}
