package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/crowdsec"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// chainClient is the client every connection of a chain comes from: in the
// allow list, placed in France by the test database, banned by nobody.
var chainClient = netip.MustParseAddrPort("192.0.2.1:40000")

// fakeLAPI is a CrowdSec Local API's decision stream that bans one address
// (not chainClient) at startup and changes nothing after.
func fakeLAPI(t testing.TB) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("startup") == "true" {
			_, _ = io.WriteString(w, `{"new":[{"id":1,"origin":"cscli","scenario":"manual","scope":"Ip","type":"ban","value":"198.51.100.7","duration":"1h"}],"deleted":[]}`)
			return
		}
		_, _ = io.WriteString(w, `{"new":[],"deleted":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// chain builds, through middleware.New as the proxy's Compile does, the
// middlewares of kinds (in order, the first outermost) and returns the
// handler in front of next.
func chain(t testing.TB, next tcp.Handler, kinds ...string) tcp.Handler {
	t.Helper()
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	db := itest.WriteRenamed(t, t.TempDir(), "country.mmdb", itest.MMDB(t, "GeoLite2-Country", itest.GeoNet{CIDR: "192.0.2.0/24", Country: "FR", Continent: "EU"}))
	huge := int64(1 << 40)
	blocks := map[string]config.TCPMiddleware{
		"inFlightConn": {InFlightConn: &config.TCPInFlightConn{Amount: 1000}},
		"ipAllowList":  {IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8", "192.0.2.0/24"}}},
		"rateLimit":    {RateLimit: &config.TCPRateLimit{Average: huge, Burst: &huge}},
		"geoIP":        {GeoIP: &config.TCPGeoIP{Databases: []string{db}, AllowCountries: []string{"FR", "DE"}}},
		"crowdSec":     {CrowdSec: &config.TCPCrowdSec{LapiURL: fakeLAPI(t), APIKey: "key"}},
	}
	mws := make([]tcp.Middleware, len(kinds))
	for i, k := range kinds {
		m := blocks[k]
		b, err := middleware.New(middleware.Spec{Name: k + "@file", Log: zerolog.Nop(), Keepers: ks}, &m)
		if err != nil || len(b.Warnings) != 0 {
			t.Fatalf("%s: %v, warnings %+v", k, err, b.Warnings)
		}
		mws[i] = b.Middleware
	}
	if bs := crowdsec.Bouncers(ks); bs != nil {
		ready := func() bool {
			ok := true
			bs.Each(func(_ string, l *crowdsec.Live) { ok = ok && l.Bouncer() != nil && l.Bouncer().Ready })
			return ok
		}
		itest.Eventually(t, 10*time.Second, ready, "the bouncer never pulled from the fake LAPI")
	}
	h := next
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

var chains = []struct {
	name  string
	kinds []string
}{
	{"ipAllowList", []string{"ipAllowList"}},
	{"crowdSec-geoIP-ipAllowList-rateLimit-inFlightConn", []string{"crowdSec", "geoIP", "ipAllowList", "rateLimit", "inFlightConn"}},
}

// serveOne passes one connection of chainClient through h and ends it, as
// the proxy does (its finishers release what the chain counted).
func serveOne(h tcp.Handler, c *tcp.Conn) {
	*c = tcp.Conn{Client: chainClient}
	h.ServeTCP(c)
	c.Finish()
}

// Admitting a connection through the internet-facing chain (the recipe in
// docs/reference/middlewares) reaches the next handler once per
// connection and allocates nothing, as one allow list alone does.
func TestChainAllocatesNothing(t *testing.T) {
	for _, ch := range chains {
		passed := 0
		h := chain(t, tcp.HandlerFunc(func(*tcp.Conn) { passed++ }), ch.kinds...)
		c := &tcp.Conn{}
		if n := testing.AllocsPerRun(1000, func() { serveOne(h, c) }); n != 0 {
			t.Errorf("%s: %v allocations per connection", ch.name, n)
		}
		if passed != 1001 { // AllocsPerRun runs once more to warm up
			t.Errorf("%s: %d connections passed, want 1001", ch.name, passed)
		}
	}
}

// BenchmarkChain is the cost per connection of deciding at accept with one
// allow list, and with crowdSec -> geoIP -> ipAllowList -> rateLimit ->
// inFlightConn (each admitting; the connection ends after the chain).
func BenchmarkChain(b *testing.B) {
	for _, ch := range chains {
		b.Run(ch.name, func(b *testing.B) {
			h := chain(b, tcp.HandlerFunc(func(*tcp.Conn) {}), ch.kinds...)
			c := &tcp.Conn{}
			b.ReportAllocs()
			for b.Loop() {
				serveOne(h, c)
			}
		})
	}
}
