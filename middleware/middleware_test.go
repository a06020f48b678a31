package middleware_test

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ipallowlist"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
	_ "github.com/tollgate-proxy/tollgate/middleware/standard"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Every built-in kind is registered by middleware/standard, in the order
// of config.TCPMiddleware's fields.
func TestKindsRegistered(t *testing.T) {
	want := []string{"inFlightConn", "ipAllowList", "rateLimit", "geoIP", "crowdSec"}
	if got := middleware.Kinds(); !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
}

// A kind that is incomplete, not a key of config.TCPMiddleware, or
// registered twice is refused at start.
func TestRegisterRefuses(t *testing.T) {
	newFn := func(middleware.Spec, *config.TCPRateLimit) (middleware.Built, error) { return middleware.Built{}, nil }
	block := func(m *config.TCPMiddleware) *config.TCPRateLimit { return m.RateLimit }
	for name, k := range map[string]middleware.Kind[config.TCPRateLimit]{
		"incomplete": {Name: "rateLimit", Block: block},
		"not a key":  {Name: "rateLimits", Block: block, New: newFn},
		"twice":      {Name: "rateLimit", Block: block, New: newFn},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", name)
				}
			}()
			middleware.Register(k)
		}()
	}
}

func spec(name string, ks *middleware.Keepers) middleware.Spec {
	return middleware.Spec{Name: name, Log: zerolog.Nop(), Keepers: ks}
}

// New finds the one kind whose block is set; none, several, or ipAllowList
// written beside its deprecated name are errors; deprecated keys come first
// among the warnings, which a failed build keeps.
func TestNew(t *testing.T) {
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	list := &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}
	for _, tc := range []struct {
		m        config.TCPMiddleware
		kind     string
		err      string
		field    string // the error's
		warnings []middleware.Warning
	}{
		{m: config.TCPMiddleware{}, err: "middleware has no type: set inFlightConn, ipAllowList, rateLimit, geoIP or crowdSec"},
		{m: config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: 1}, RateLimit: &config.TCPRateLimit{Average: 1}}, err: "several types [inFlightConn rateLimit]"},
		{m: config.TCPMiddleware{IPAllowList: list, IPWhiteList: list}, err: "both ipAllowList and ipWhiteList", field: "ipWhiteList"},
		{m: config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: 1}}, kind: "inFlightConn"},
		{m: config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: -1}}, kind: "inFlightConn", err: "is negative", field: "inFlightConn.amount"},
		{m: config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: 1, FailureMode: "open"}}, kind: "inFlightConn",
			warnings: []middleware.Warning{{Field: "inFlightConn.failureMode", Message: "inFlightConn.failureMode has no effect without inFlightConn.store"}}},
		{m: config.TCPMiddleware{IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.1/8"}}}, kind: "ipAllowList",
			warnings: []middleware.Warning{
				{Field: "ipWhiteList", Message: "ipWhiteList is deprecated (as in Traefik v3): it applies as ipAllowList; rename it ipAllowList"},
				{Field: "ipWhiteList.sourceRange[0]"},
			}},
		{m: config.TCPMiddleware{IPWhiteList: &config.TCPIPAllowList{SourceRange: []string{"nope"}}}, kind: "ipAllowList", err: "ipWhiteList.sourceRange", field: "ipWhiteList.sourceRange[0]",
			warnings: []middleware.Warning{{Field: "ipWhiteList", Message: "ipWhiteList is deprecated (as in Traefik v3): it applies as ipAllowList; rename it ipAllowList"}}},
	} {
		b, err := middleware.New(spec("m@file", ks), &tc.m)
		if b.Kind != tc.kind {
			t.Errorf("%+v: kind %q, want %q", tc.m, b.Kind, tc.kind)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || config.FieldOf(err) != tc.field || b.Middleware != nil || b.Live != nil {
				t.Errorf("%+v: %+v, error %v on %q, want %q on %q", tc.m, b, err, config.FieldOf(err), tc.err, tc.field)
			}
		} else if err != nil || b.Middleware == nil || b.Live == nil {
			t.Errorf("%+v: %+v, error %v", tc.m, b, err)
		}
		if len(b.Warnings) != len(tc.warnings) {
			t.Errorf("%+v: warnings %+v, want %+v", tc.m, b.Warnings, tc.warnings)
			continue
		}
		for i, w := range tc.warnings {
			if b.Warnings[i].Field != w.Field || (w.Message != "" && b.Warnings[i].Message != w.Message) {
				t.Errorf("%+v: warning %d %+v, want %+v", tc.m, i, b.Warnings[i], w)
			}
		}
	}
}

// The Keepers hold each kind's state: a sweep gives each kind the names of
// its own middlewares built, and Counts reports each middleware under its
// kind's type.
func TestKeepers(t *testing.T) {
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	build := func(name string, m config.TCPMiddleware) tcp.Handler {
		t.Helper()
		b, err := middleware.New(spec(name, ks), &m)
		if err != nil {
			t.Fatal(err)
		}
		return b.Middleware(tcp.HandlerFunc(func(*tcp.Conn) {}))
	}
	h := build("lim@file", config.TCPMiddleware{InFlightConn: &config.TCPInFlightConn{Amount: 1}})
	build("rate@file", config.TCPMiddleware{RateLimit: &config.TCPRateLimit{Average: 1}})
	a := build("allow@file", config.TCPMiddleware{IPAllowList: &config.TCPIPAllowList{SourceRange: []string{"10.0.0.0/8"}}})
	a.ServeTCP(&tcp.Conn{Client: netip.MustParseAddrPort("10.0.0.1:1")})
	a.ServeTCP(&tcp.Conn{Client: netip.MustParseAddrPort("192.0.2.1:1")})
	h.ServeTCP(&tcp.Conn{Client: netip.MustParseAddrPort("10.0.0.1:1")}) // held: never finished
	got := map[string]middleware.Counts{}
	ks.Counts(func(name string, c middleware.Counts) { got[name] = c })
	if c := got["lim@file"]; c.Type != "inflightconn" || c.Admitted != 1 || c.InFlight != 1 || len(c.Reasons) != 1 || c.Reasons[0].Reason != tcp.ReasonLimit {
		t.Errorf("inFlightConn counts %+v", c)
	}
	if c := got["allow@file"]; c.Type != "ipallowlist" || c.Admitted != 1 || c.Rejected != 1 || len(c.Reasons) != 1 || c.Reasons[0] != (middleware.Refused{Reason: tcp.ReasonAllowList, N: 1}) {
		t.Errorf("ipAllowList counts %+v", c)
	}
	if c, ok := got["rate@file"]; !ok || c.Type != "ratelimit" {
		t.Errorf("rateLimit counts %+v", c)
	}
	// A sweep without them: the limiter holding a connection stays, the
	// idle rate limiter goes, the allow list's counts stay.
	ks.Sweep(map[string]string{})
	if inflightconn.Limiters(ks).Lookup("lim@file") == nil || ratelimit.Limiters(ks).Lookup("rate@file") != nil {
		t.Error("a sweep kept the idle rate limiter or forgot the busy one")
	}
	// A sweep that names a middleware under another kind does not keep it.
	ks.Sweep(map[string]string{"rate@file": "inFlightConn"})
	n := 0
	ipallowlist.Lists(ks).Each(func(string, *ipallowlist.Counters) { n++ })
	if n != 1 {
		t.Errorf("%d allow lists' counters after the sweeps, want 1", n)
	}
	if middleware.KeeperOf[*inflightconn.Registry](nil, "inFlightConn") != nil || middleware.KeeperOf[*ratelimit.Registry](ks, "inFlightConn") != nil {
		t.Error("KeeperOf found a keeper of no Keepers, or of another type")
	}
}

// An AddrGate decides on the address, counts, records the refusal, and
// logs a flood in a bounded number of lines, allocating nothing per
// connection.
func TestAddrGate(t *testing.T) {
	var buf bytes.Buffer
	var counts middleware.AddrCounts
	g := &middleware.AddrGate[int]{
		Name: "gate@file", Reason: tcp.ReasonGeoIP,
		Decide: func(a netip.Addr) (int, bool) { return int(a.As4()[3]), a.As4()[3] < 10 },
		Note:   func(int) string { return "denied" },
		Why:    func(d int) string { return "denied for being above ten" },
		Counts: &counts, Log: zerolog.New(&buf),
	}
	passed := 0
	h := g.Middleware()(tcp.HandlerFunc(func(*tcp.Conn) { passed++ }))
	rec := tcp.NewRefusals(16)
	for i := range 1000 {
		h.ServeTCP(&tcp.Conn{Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 20)}), 1), Refusals: rec})
	}
	if a, d := counts.Counts(); passed != 500 || a != 500 || d != 500 {
		t.Errorf("passed %d, counts %d/%d", passed, a, d)
	}
	if lines := strings.Count(buf.String(), "\n"); lines == 0 || lines > 20 || !strings.Contains(buf.String(), "denied for being above ten") {
		t.Errorf("%d log lines for 500 refusals of 10 clients: %s", lines, buf.String())
	}
	if got, _ := rec.Find(tcp.Match{}, 1); len(got) == 0 || got[0].Reason != tcp.ReasonGeoIP || got[0].By != "gate@file" || got[0].Message != "denied" {
		t.Errorf("recorded %+v", got)
	}
	c := &tcp.Conn{}
	if n := testing.AllocsPerRun(1000, func() {
		*c = tcp.Conn{Client: netip.MustParseAddrPort("192.0.2.1:1")}
		h.ServeTCP(c)
	}); n != 0 {
		t.Errorf("%v allocations per admitted connection", n)
	}
}

// WarningsOf places each error on the field it names.
func TestWarningsOf(t *testing.T) {
	w := middleware.WarningsOf([]error{config.FieldErrorf("geoIP.unknown", "x"), errors.New("y")})
	if len(w) != 2 || w[0] != (middleware.Warning{Field: "geoIP.unknown", Message: "x"}) || w[1] != (middleware.Warning{Message: "y"}) {
		t.Fatalf("%+v", w)
	}
	if middleware.WarningsOf(nil) != nil {
		t.Fatal("warnings of no error")
	}
}
