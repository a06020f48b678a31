package metrics

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lp "github.com/influxdata/line-protocol"
	"github.com/rs/zerolog"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the receiver reads what the exporter compresses
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// source is a Snapshot a test changes between pushes.
type source struct{ p atomic.Pointer[Snapshot] }

func (s *source) set(v Snapshot)   { s.p.Store(&v) }
func (s *source) read() Snapshot   { return *s.p.Load() }
func (s *source) reloads(n uint64) { v := s.read(); v.Reloads = n; s.set(v) }
func (s *source) open(ep string, n int64) {
	v := s.read()
	v.Open = slices.Clone(v.Open)
	for i := range v.Open {
		if v.Open[i].EntryPoint == ep {
			v.Open[i].Connections = n
		}
	}
	s.set(v)
}

var (
	reloadedAt = time.Unix(1767225600, 0)
	expiresA   = time.Unix(1798761600, 0)
	expiresB   = time.Unix(1793491200, 0)
)

// newSource is two entry points (db with 3 connections, web with none),
// two reloads and two certificates, the first with two DNS names.
func newSource() *source {
	s := &source{}
	s.set(Snapshot{
		Reloads: 2, LastReload: reloadedAt,
		Open: []EntryPointConnections{{"db", 3}, {"web", 0}},
		Certificates: []Certificate{
			{CN: "db.example", Serial: "42", SANs: "db.example,db2.example", NotAfter: expiresA},
			{CN: "web.example", Serial: "7", SANs: "web.example", NotAfter: expiresB},
		},
	})
	return s
}

func start(t *testing.T, cfg *config.Metrics, src *source) *Exporters {
	t.Helper()
	e, err := Start(context.Background(), cfg, "test", src.read, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

// statsdLine is one StatsD line: name:value|type[|@rate][|#tag,tag].
type statsdLine struct {
	name  string
	value float64
	typ   string
	tags  string
}

func parseStatsd(t *testing.T, line string) statsdLine {
	t.Helper()
	name, rest, ok := strings.Cut(line, ":")
	parts := strings.Split(rest, "|")
	if !ok || len(parts) < 2 {
		t.Fatalf("not a StatsD line: %q", line)
	}
	v, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		t.Fatalf("%q: value: %v", line, err)
	}
	l := statsdLine{name: name, value: v, typ: parts[1]}
	for _, p := range parts[2:] {
		if tags, ok := strings.CutPrefix(p, "#"); ok {
			l.tags = tags
		}
	}
	return l
}

// datagramReceiver reads datagrams from pc and hands out their lines.
type datagramReceiver struct {
	mu    sync.Mutex
	lines []string
	grams int
}

func receiveDatagrams(t *testing.T, pc net.PacketConn) *datagramReceiver {
	r := &datagramReceiver{}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.grams++
			r.lines = append(r.lines, strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")...)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *datagramReceiver) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines), r.grams
}

// The DogStatsD exporter sends Traefik's names under the prefix, with
// Traefik's labels as tags, one line per datagram: the counter sends the
// reloads since the last push (their sum is the total, never counted
// twice), the gauges their value at each push, Traefik's cn, serial and
// sans tags on the certificate expiry; and Stop pushes a last time.
func TestDatadogReceiver(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rx := receiveDatagrams(t, pc)
	src := newSource()
	cfg := &config.Datadog{}
	cfg.SetDefaults()
	cfg.Address, cfg.PushInterval, cfg.Prefix = pc.LocalAddr().String(), config.Duration(20*time.Millisecond), "edge"
	e := start(t, &config.Metrics{Datadog: cfg}, src)

	// pushes counts the pushes received (one lastSuccessTimestamp each).
	pushes := func(lines []string) int {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "edge.config.reload.lastSuccessTimestamp:") {
				n++
			}
		}
		return n
	}
	itest.Eventually(t, 5*time.Second, func() bool { l, _ := rx.snapshot(); return pushes(l) >= 2 }, "two DogStatsD pushes")
	src.reloads(5)
	src.open("db", 1)
	l0, _ := rx.snapshot()
	itest.Eventually(t, 5*time.Second, func() bool { l, _ := rx.snapshot(); return pushes(l) >= pushes(l0)+2 }, "two more pushes")
	src.reloads(6) // sent by the next push, or by Stop's last one
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		l, _ := rx.snapshot()
		sum := 0.0
		for _, s := range l {
			if strings.HasPrefix(s, "edge.config.reload.total:") {
				sum += parseStatsd(t, s).value
			}
		}
		return sum == 6
	}, "the reload counts add up to 6")

	lines, grams := rx.snapshot()
	if grams != len(lines) {
		t.Errorf("%d datagrams for %d lines: want one line each", grams, len(lines))
	}
	var reloads []float64
	last := map[string]statsdLine{}
	for _, s := range lines {
		l := parseStatsd(t, s)
		switch l.name {
		case "edge.config.reload.total":
			if l.typ != "c" || l.tags != "" {
				t.Errorf("%q: want a counter without tags", s)
			}
			reloads = append(reloads, l.value)
		case "edge.config.reload.lastSuccessTimestamp", "edge.open.connections", "edge.tls.certs.notAfterTimestamp":
			if l.typ != "g" {
				t.Errorf("%q: want a gauge", s)
			}
			last[l.name+"|"+l.tags] = l
		default:
			t.Errorf("unexpected line %q", s)
		}
	}
	if !slices.Equal(reloads, []float64{2, 3, 1}) {
		t.Errorf("reload counts %v, want [2 3 1]: the first push, the change, Stop's last push", reloads)
	}
	for key, want := range map[string]float64{
		"edge.config.reload.lastSuccessTimestamp|":                                             float64(reloadedAt.Unix()),
		"edge.open.connections|entrypoint:db,protocol:TCP":                                     1,
		"edge.open.connections|entrypoint:web,protocol:TCP":                                    0,
		"edge.tls.certs.notAfterTimestamp|cn:db.example,serial:42,sans:db.example,db2.example": float64(expiresA.Unix()),
		"edge.tls.certs.notAfterTimestamp|cn:web.example,serial:7,sans:web.example":            float64(expiresB.Unix()),
	} {
		if l, ok := last[key]; !ok || l.value != want {
			t.Errorf("%s: last %v (sent: %v), want %v", key, l.value, ok, want)
		}
	}
	if len(last) != 5 {
		t.Errorf("series %v, want 5", slices.Sorted(maps.Keys(last)))
	}
}

// Over a unix datagram socket (unix://path), as the Datadog agent listens.
func TestDatadogUnixgramReceiver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dsd.socket")
	pc, err := net.ListenPacket("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	rx := receiveDatagrams(t, pc)
	cfg := &config.Datadog{}
	cfg.SetDefaults()
	cfg.Address, cfg.PushInterval = "unix://"+path, config.Duration(20*time.Millisecond)
	start(t, &config.Metrics{Datadog: cfg}, newSource())
	itest.Eventually(t, 5*time.Second, func() bool {
		l, _ := rx.snapshot()
		return slices.Contains(l, "traefik.open.connections:3.000000|g|#entrypoint:db,protocol:TCP")
	}, "open connections of db over unixgram")
}

// StatsD has no labels: it sends the connections of every entry point
// together and the first certificate to expire, under the prefix.
func TestStatsdReceiver(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rx := receiveDatagrams(t, pc)
	src := newSource()
	cfg := &config.Statsd{}
	cfg.SetDefaults()
	cfg.Address, cfg.PushInterval = pc.LocalAddr().String(), config.Duration(20*time.Millisecond)
	start(t, &config.Metrics{StatsD: cfg}, src)
	want := []string{
		"traefik.config.reload.total:2.000000|c",
		fmt.Sprintf("traefik.config.reload.lastSuccessTimestamp:%d.000000|g", reloadedAt.Unix()),
		"traefik.open.connections:3.000000|g",
		fmt.Sprintf("traefik.tls.certs.notAfterTimestamp:%d.000000|g", expiresB.Unix()),
	}
	itest.Eventually(t, 5*time.Second, func() bool {
		l, _ := rx.snapshot()
		for _, w := range want {
			if !slices.Contains(l, w) {
				return false
			}
		}
		return true
	}, "StatsD lines %q", want)
	src.open("web", 4)
	itest.Eventually(t, 5*time.Second, func() bool {
		l, _ := rx.snapshot()
		return slices.Contains(l, "traefik.open.connections:7.000000|g")
	}, "the sum of the entry points' connections after a change")
	lines, _ := rx.snapshot()
	for _, l := range lines {
		if strings.Contains(l, "|#") {
			t.Errorf("%q: StatsD lines carry no tags", l)
		}
	}
}

// influxRx is an InfluxDB v2 write endpoint: it checks the token, org and
// bucket, parses the line protocol and keeps the points; while fail is
// set it answers 503 and keeps nothing.
type influxRx struct {
	t       *testing.T
	mu      sync.Mutex
	points  []lp.Metric
	fail    atomic.Bool
	refused atomic.Int64
	bad     []string
}

func (rx *influxRx) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	problem := func(s string) {
		rx.mu.Lock()
		rx.bad = append(rx.bad, s)
		rx.mu.Unlock()
		http.Error(w, s, http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/api/v2/write" {
		problem(r.Method + " " + r.URL.Path)
		return
	}
	q := r.URL.Query()
	if q.Get("org") != "acme" || q.Get("bucket") != "edge" || r.Header.Get("Authorization") != "Token s3cret" {
		problem(fmt.Sprintf("org %q bucket %q auth %q", q.Get("org"), q.Get("bucket"), r.Header.Get("Authorization")))
		return
	}
	if rx.fail.Load() {
		rx.refused.Add(1)
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			problem(err.Error())
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	h := lp.NewMetricHandler()
	if p := q.Get("precision"); p != "" && p != "ns" {
		problem("precision " + p)
		return
	}
	ms, err := lp.NewParser(h).Parse(b)
	if err != nil {
		problem(fmt.Sprintf("line protocol %q: %v", b, err))
		return
	}
	rx.mu.Lock()
	rx.points = append(rx.points, ms...)
	rx.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rx *influxRx) snapshot() ([]lp.Metric, []string) {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return slices.Clone(rx.points), slices.Clone(rx.bad)
}

func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// The InfluxDB v2 exporter writes line protocol to /api/v2/write with the
// token (read from a file here), org and bucket: Traefik's measurements,
// additionalLabels as tags on each, the counter's increase in "count" and
// the gauges' values in "value". A refused write keeps the increase for the
// next one.
func TestInfluxDB2Receiver(t *testing.T) {
	rx := &influxRx{t: t}
	rx.fail.Store(true)
	addr := serveHTTP(t, rx)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	cfg := &config.InfluxDB2{}
	cfg.SetDefaults()
	cfg.Address, cfg.Token, cfg.Org, cfg.Bucket = "http://"+addr, tokenFile, "acme", "edge"
	cfg.PushInterval, cfg.AdditionalLabels = config.Duration(20*time.Millisecond), map[string]string{"host": "edge-1"}
	start(t, &config.Metrics{InfluxDB2: cfg}, src)

	itest.Eventually(t, 5*time.Second, func() bool { return rx.refused.Load() >= 3 }, "three writes refused")
	src.reloads(3)
	rx.fail.Store(false)
	itest.Eventually(t, 5*time.Second, func() bool {
		ps, _ := rx.snapshot()
		return len(ps) >= 10
	}, "points written")
	ps, bad := rx.snapshot()
	if len(bad) > 0 {
		t.Fatalf("bad requests: %q", bad)
	}
	count := 0.0
	seen := map[string]bool{}
	for _, p := range ps {
		tags := map[string]string{}
		for _, tg := range p.TagList() {
			tags[tg.Key] = tg.Value
		}
		if tags["host"] != "edge-1" {
			t.Errorf("%s %v: no additional label host=edge-1", p.Name(), tags)
		}
		fields := map[string]any{}
		for _, f := range p.FieldList() {
			fields[f.Key] = f.Value
		}
		switch p.Name() {
		case "traefik.config.reload.total":
			count += fields["count"].(float64)
		case "traefik.config.reload.lastSuccessTimestamp":
			if fields["value"] != float64(reloadedAt.Unix()) {
				t.Errorf("last reload %v", fields)
			}
		case "traefik.open.connections":
			want := map[string]float64{"db": 3, "web": 0}[tags["entrypoint"]]
			if tags["protocol"] != "TCP" || fields["value"] != want {
				t.Errorf("open connections %v %v", tags, fields)
			}
			seen[p.Name()+"/"+tags["entrypoint"]] = true
		case "traefik.tls.certs.notAfterTimestamp":
			want := map[string]float64{"db.example": float64(expiresA.Unix()), "web.example": float64(expiresB.Unix())}[tags["cn"]]
			if fields["value"] != want || tags["serial"] == "" || tags["sans"] == "" {
				t.Errorf("certificate %v %v", tags, fields)
			}
			if tags["cn"] == "db.example" && tags["sans"] != "db.example,db2.example" {
				t.Errorf("sans %q", tags["sans"])
			}
			seen[p.Name()+"/"+tags["cn"]] = true
		default:
			t.Errorf("unexpected measurement %s", p.Name())
		}
		seen[p.Name()] = true
	}
	if count != 3 {
		t.Errorf("reload counts add up to %v, want 3 (the writes refused kept them)", count)
	}
	if len(seen) != 8 {
		t.Errorf("measurements %v", seen)
	}
}

// otlpRx collects the OTLP export requests it receives.
type otlpRx struct {
	collectorpb.UnimplementedMetricsServiceServer
	mu   sync.Mutex
	reqs []*collectorpb.ExportMetricsServiceRequest
	meta []string // content type, encoding, path of HTTP requests
}

func (rx *otlpRx) Export(_ context.Context, req *collectorpb.ExportMetricsServiceRequest) (*collectorpb.ExportMetricsServiceResponse, error) {
	rx.mu.Lock()
	rx.reqs = append(rx.reqs, req)
	rx.mu.Unlock()
	return &collectorpb.ExportMetricsServiceResponse{}, nil
}

func (rx *otlpRx) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	req := &collectorpb.ExportMetricsServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(b, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rx.mu.Lock()
	rx.reqs = append(rx.reqs, req)
	rx.meta = append(rx.meta, r.Header.Get("Content-Type")+" "+r.Header.Get("Content-Encoding")+" "+r.URL.Path+" "+r.Header.Get("X-Tenant"))
	rx.mu.Unlock()
	out, _ := proto.Marshal(&collectorpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// last returns the latest request's metrics by name, and its resource's
// attributes.
func (rx *otlpRx) last() (map[string]*metricspb.Metric, map[string]string, string, int) {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	if len(rx.reqs) == 0 {
		return nil, nil, "", 0
	}
	req := rx.reqs[len(rx.reqs)-1]
	ms := map[string]*metricspb.Metric{}
	res := map[string]string{}
	scope := ""
	for _, rm := range req.ResourceMetrics {
		for _, a := range rm.GetResource().GetAttributes() {
			res[a.Key] = a.GetValue().GetStringValue()
		}
		for _, sm := range rm.ScopeMetrics {
			scope = sm.GetScope().GetName()
			for _, m := range sm.Metrics {
				ms[m.Name] = m
			}
		}
	}
	return ms, res, scope, len(rx.reqs)
}

func attrs(kvs []*commonpb.KeyValue) string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key+"="+kv.GetValue().GetStringValue())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// checkOTLP checks an export of newSource's snapshot with reloads 5:
// Traefik's names, units and attributes, the counter cumulative and
// monotonic, the resource's service.name and extra attributes.
func checkOTLP(t *testing.T, rx *otlpRx) {
	t.Helper()
	var ms map[string]*metricspb.Metric
	var res map[string]string
	var scope string
	itest.Eventually(t, 10*time.Second, func() bool {
		ms, res, scope, _ = rx.last()
		r := ms["traefik_config_reloads_total"]
		return r != nil && len(r.GetSum().GetDataPoints()) == 1 && r.GetSum().GetDataPoints()[0].GetAsDouble() == 5
	}, "an export with traefik_config_reloads_total 5")
	if res["service.name"] != "edge" || res["deployment.environment"] != "test" || res["service.version"] != "test" {
		t.Errorf("resource %v", res)
	}
	if _, ok := res["process.command_args"]; ok {
		t.Errorf("the resource has the command line (secrets): %v", res)
	}
	if scope != "github.com/tollgate-proxy/tollgate" {
		t.Errorf("scope %q", scope)
	}
	r := ms["traefik_config_reloads_total"]
	if s := r.GetSum(); !s.IsMonotonic || s.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE || r.Unit != "1" {
		t.Errorf("reloads %v", r)
	}
	for name, want := range map[string]struct {
		unit   string
		points map[string]float64
	}{
		"traefik_config_last_reload_success": {"ms", map[string]float64{"": float64(reloadedAt.Unix())}},
		"traefik_open_connections":           {"1", map[string]float64{"entrypoint=db,protocol=TCP": 3, "entrypoint=web,protocol=TCP": 0}},
		"traefik_tls_certs_not_after": {"s", map[string]float64{
			"cn=db.example,sans=db.example,db2.example,serial=42": float64(expiresA.Unix()),
			"cn=web.example,sans=web.example,serial=7":            float64(expiresB.Unix()),
		}},
	} {
		m := ms[name]
		if m == nil || m.GetGauge() == nil || m.Unit != want.unit {
			t.Errorf("%s: %v, want a gauge in %q", name, m, want.unit)
			continue
		}
		got := map[string]float64{}
		for _, dp := range m.GetGauge().DataPoints {
			got[attrs(dp.Attributes)] = dp.GetAsDouble()
		}
		if fmt.Sprint(got) != fmt.Sprint(want.points) {
			t.Errorf("%s: %v, want %v", name, got, want.points)
		}
	}
	if len(ms) != 4 {
		t.Errorf("%d metrics, want Traefik's 4", len(ms))
	}
}

func otlpConfig(interval time.Duration) *config.OTLP {
	o := &config.OTLP{}
	o.SetDefaults()
	o.PushInterval, o.ServiceName = config.Duration(interval), "edge"
	o.ResourceAttributes = map[string]string{"deployment.environment": "test"}
	return o
}

// OTLP over gRPC (insecure, gzip), to a server of the OTLP metrics service.
func TestOTLPGRPCReceiver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rx := &otlpRx{}
	collectorpb.RegisterMetricsServiceServer(gs, rx)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	src := newSource()
	src.reloads(5)
	o := otlpConfig(50 * time.Millisecond)
	o.GRPC = &config.OTelGRPC{Endpoint: ln.Addr().String(), Insecure: true}
	start(t, &config.Metrics{OTLP: o}, src)
	checkOTLP(t, rx)
}

// OTLP over HTTP: protobuf, gzip, the default path /v1/metrics, or the
// endpoint's own path, with the headers configured; and Stop exports once
// more.
func TestOTLPHTTPReceiver(t *testing.T) {
	for _, path := range []string{"", "/otlp/v1/metrics"} {
		t.Run("path="+path, func(t *testing.T) {
			rx := &otlpRx{}
			addr := serveHTTP(t, rx)
			src := newSource()
			src.reloads(5)
			o := otlpConfig(time.Hour) // Stop's export alone
			o.HTTP = &config.OTelHTTP{Endpoint: "http://" + addr + path, Headers: map[string]string{"X-Tenant": "edge"}}
			e := start(t, &config.Metrics{OTLP: o}, src)
			if _, _, _, n := rx.last(); n != 0 {
				t.Fatalf("%d exports before the first interval", n)
			}
			if err := e.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkOTLP(t, rx)
			want := "/v1/metrics"
			if path != "" {
				want = path
			}
			rx.mu.Lock()
			meta := rx.meta[0]
			rx.mu.Unlock()
			if meta != "application/x-protobuf gzip "+want+" edge" {
				t.Errorf("request %q, want protobuf, gzip, %s, the header", meta, want)
			}
		})
	}
}

// A receiver that is away is logged once, not at every push, and the
// exporter sends once it is back.
func TestPushFailureLoggedOnceThenRecovers(t *testing.T) {
	rx := &influxRx{t: t}
	rx.fail.Store(true)
	addr := serveHTTP(t, rx)
	cfg := &config.InfluxDB2{}
	cfg.SetDefaults()
	cfg.Address, cfg.Token, cfg.Org, cfg.Bucket = "http://"+addr, "s3cret", "acme", "edge"
	cfg.PushInterval = config.Duration(10 * time.Millisecond)
	var buf itest.Buffer
	e, err := Start(context.Background(), &config.Metrics{InfluxDB2: cfg}, "test", newSource().read, zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(context.Background()) }()
	itest.Eventually(t, 5*time.Second, func() bool { return rx.refused.Load() >= 10 }, "ten pushes refused")
	rx.fail.Store(false)
	itest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(buf.String(), "pushing the series again") }, "the recovery logged")
	if n := strings.Count(buf.String(), "cannot push the series"); n != 1 {
		t.Errorf("%d failure lines, want 1:\n%s", n, buf.String())
	}
	if ps, _ := rx.snapshot(); len(ps) == 0 {
		t.Error("nothing written after the receiver came back")
	}
}

// An exporter that cannot be built names its option.
func TestStartErrorsNameTheOption(t *testing.T) {
	o := otlpConfig(time.Second)
	o.HTTP.TLS = &config.KVClientTLS{CA: filepath.Join(t.TempDir(), "missing.pem")}
	_, err := Start(context.Background(), &config.Metrics{OTLP: o}, "test", newSource().read, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "metrics.otlp.http.tls.ca=") {
		t.Errorf("missing CA: %v", err)
	}
	i := &config.InfluxDB2{}
	i.SetDefaults()
	i.Token = t.TempDir() // a directory: it exists, and cannot be read
	_, err = Start(context.Background(), &config.Metrics{InfluxDB2: i}, "test", newSource().read, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "metrics.influxDB2.token") {
		t.Errorf("unreadable token: %v", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) {
		t.Errorf("%v: want the file's error", err)
	}
}
