package crowdsec

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// next counts the connections a middleware passes on.
type next struct{ n int }

func (h *next) ServeTCP(*tcp.Conn) { h.n++ }

// build builds the middleware as the proxy does (the kind's constructor,
// which middleware.New calls), with the state of ks.
func build(ks *middleware.Keepers, name string, cfg *Config, offline bool) (tcp.Middleware, *Live, []middleware.Warning, error) {
	b, err := Build(middleware.Spec{Name: name, Log: zerolog.Nop(), Offline: offline, Keepers: ks}, cfg)
	live, _ := b.Live.(*Live)
	return b.Middleware, live, b.Warnings, err
}

func conn(ip string) *tcp.Conn {
	return &tcp.Conn{Client: netip.AddrPortFrom(netip.MustParseAddr(ip), 1)}
}

// Offline (tollgate check) the block is judged, on its keys, and nothing is
// read or reached: the bouncer answers by its failure mode.
func TestKeeperBuildOffline(t *testing.T) {
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	for mode, admitted := range map[string]uint64{"": 0, "open": 1} {
		mw, live, _, err := build(ks, "cs-"+mode+"@file", &Config{LapiURL: "http://127.0.0.1:1", APIKeyFile: "/nonexistent/key", FailureMode: mode}, true)
		if err != nil {
			t.Fatalf("failureMode %q: %v", mode, err)
		}
		mw(&next{}).ServeTCP(conn("192.0.2.1"))
		if a, d := live.Counts(); a != admitted || d != 1-admitted {
			t.Errorf("failureMode %q: counts %d/%d", mode, a, d)
		}
	}
	if RefusalReason.String() != "crowdsec" {
		t.Errorf("reason %s", RefusalReason)
	}
	_, _, warns, err := build(ks, "clear@file", &Config{LapiURL: "http://lapi.example:8080", APIKey: "k"}, true)
	if err != nil || len(warns) != 1 || warns[0].Field != "crowdSec.lapiURL" || !strings.Contains(warns[0].Message, "in clear") {
		t.Errorf("http to another host: %v, warnings %v", err, warns)
	}
	if _, _, _, err := build(ks, "bad@file", &Config{LapiURL: "http://127.0.0.1:8080", APIKey: "k", FailureMode: "fail-open"}, true); config.FieldOf(err) != "crowdSec.failureMode" {
		t.Errorf("bad failure mode: %v on %q", err, config.FieldOf(err))
	}
}

// With a real LAPI, built as the proxy builds it: the bouncer pulls, the
// handler refuses a banned client, its state is in its Live, and a sweep
// without it stops it.
func TestKeeperBuildWithLAPI(t *testing.T) {
	l := startLAPI(t, nil)
	ks := middleware.NewKeepers(middleware.Options{})
	t.Cleanup(ks.Close)
	k := Bouncers(ks)
	mw, live, _, err := build(ks, "cs@file", &Config{LapiURL: l.URL, APIKey: l.Key, UpdateInterval: dur(time.Second)}, false)
	if err != nil {
		t.Fatal(err)
	}
	bouncer, _ := k.reg.Lookup("cs@file")
	waitReady(t, bouncer)
	l.CSCLI("decisions", "add", "--ip", "192.0.2.7", "--duration", "1h")
	within(t, time.Second+slack, func() bool { return bouncer.Status().IPs == 1 }, "the ban never pulled")
	nx := &next{}
	h := mw(nx)
	h.ServeTCP(conn("192.0.2.7"))
	h.ServeTCP(conn("192.0.2.8"))
	if a, d := live.Counts(); nx.n != 1 || a != 1 || d != 1 {
		t.Errorf("passed %d, counts %d/%d", nx.n, a, d)
	}
	if st := live.Bouncer(); st == nil || !st.Ready || st.IPs != 1 {
		t.Errorf("bouncer %+v", st)
	}
	k.Sweep(nil)
	if _, ok := k.reg.Lookup("cs@file"); ok {
		t.Error("the bouncer of no middleware is kept")
	}
}
