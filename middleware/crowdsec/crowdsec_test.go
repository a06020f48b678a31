package crowdsec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }

func dur(d time.Duration) *config.Duration { c := config.Duration(d); return &c }

func TestValidate(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // of the error; "" for none
		msg   string
		warns []string
	}{
		{name: "ok", cfg: Config{LapiURL: "http://127.0.0.1:8080", APIKey: "abc"}},
		{name: "key file, path prefix", cfg: Config{LapiURL: "http://localhost:8080/lapi/", APIKeyFile: keyFile, FailureMode: "OPEN", UpdateInterval: dur(time.Minute)}},
		{name: "client certificate stands for the key", cfg: Config{LapiURL: "https://lapi:8080", TLS: &ClientTLS{Cert: "c.pem", Key: "k.pem"}}},
		{name: "no url", cfg: Config{APIKey: "k"}, field: "crowdSec.lapiURL", msg: "no Local API"},
		{name: "scheme", cfg: Config{LapiURL: "ftp://x", APIKey: "k"}, field: "crowdSec.lapiURL", msg: "http or https"},
		{name: "no host", cfg: Config{LapiURL: "http://:8080", APIKey: "k"}, field: "crowdSec.lapiURL", msg: "no host"},
		{name: "bad port", cfg: Config{LapiURL: "http://h:99999", APIKey: "k"}, field: "crowdSec.lapiURL", msg: "port"},
		{name: "user info", cfg: Config{LapiURL: "http://u:secret@h:8080", APIKey: "k"}, field: "crowdSec.lapiURL", msg: "user information"},
		{name: "query", cfg: Config{LapiURL: "http://h:8080/?a=b", APIKey: "k"}, field: "crowdSec.lapiURL", msg: "query"},
		{name: "no credentials", cfg: Config{LapiURL: "http://h:8080"}, field: "crowdSec.apiKey", msg: "no credentials"},
		{name: "both keys", cfg: Config{LapiURL: "http://h:8080", APIKey: "k", APIKeyFile: "f"}, field: "crowdSec.apiKeyFile", msg: "both"},
		{name: "key with a newline", cfg: Config{LapiURL: "http://h:8080", APIKey: "k\nX-Evil: 1"}, field: "crowdSec.apiKey", msg: "cannot carry"},
		{name: "interval", cfg: Config{LapiURL: "http://h:8080", APIKey: "k", UpdateInterval: dur(0)}, field: "crowdSec.updateInterval", msg: "not positive"},
		{name: "failure mode", cfg: Config{LapiURL: "http://h:8080", APIKey: "k", FailureMode: "ajar"}, field: "crowdSec.failureMode", msg: `"ajar" is not open or closed`},
		{name: "tls on http", cfg: Config{LapiURL: "http://h:8080", APIKey: "k", TLS: &ClientTLS{CA: "ca.pem"}}, field: "crowdSec.tls", msg: "https://"},
		{name: "cert without key", cfg: Config{LapiURL: "https://h:8080", APIKey: "k", TLS: &ClientTLS{Cert: "c.pem"}}, field: "crowdSec.tls.key", msg: "without tls.key"},
		{name: "warnings", cfg: Config{LapiURL: "http://lapi.example:8080", APIKey: "k", UpdateInterval: dur(100 * time.Millisecond)},
			warns: []string{"crowdSec.updateInterval", "crowdSec.lapiURL"}},
		{name: "insecure", cfg: Config{LapiURL: "https://h:8080", APIKey: "k", TLS: &ClientTLS{InsecureSkipVerify: true}}, warns: []string{"crowdSec.tls.insecureSkipVerify"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, warns, err := validate(&tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if !strings.HasSuffix(s.url.Path, "/v1/decisions/stream") || strings.Contains(s.url.Path, "//") {
					t.Errorf("stream URL %s", s.url)
				}
			} else {
				if err == nil {
					t.Fatalf("no error, want one on %s", tc.field)
				}
				if got := config.FieldOf(err); got != tc.field {
					t.Errorf("error on %q, want %q: %v", got, tc.field, err)
				}
				if !strings.HasPrefix(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error %q does not start with %q and say %q", err, tc.field, tc.msg)
				}
				if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "X-Evil") {
					t.Errorf("the error shows a secret: %v", err)
				}
			}
			var got []string
			for _, w := range warns {
				got = append(got, config.FieldOf(w))
			}
			if strings.Join(got, " ") != strings.Join(tc.warns, " ") {
				t.Errorf("warnings on %v, want %v (%v)", got, tc.warns, warns)
			}
		})
	}
}

// New reads the files the block names: each error is on its field and
// names the file.
func TestNewReadsFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
		file  string
	}{
		{Config{LapiURL: "http://127.0.0.1:1", APIKeyFile: missing}, "crowdSec.apiKeyFile", missing},
		{Config{LapiURL: "http://127.0.0.1:1", APIKeyFile: empty}, "crowdSec.apiKeyFile", empty},
		{Config{LapiURL: "https://127.0.0.1:1", APIKey: "k", TLS: &ClientTLS{CA: missing}}, "crowdSec.tls.ca", missing},
		{Config{LapiURL: "https://127.0.0.1:1", APIKey: "k", TLS: &ClientTLS{CA: empty}}, "crowdSec.tls.ca", empty},
		{Config{LapiURL: "https://127.0.0.1:1", TLS: &ClientTLS{Cert: missing, Key: empty}}, "crowdSec.tls.cert", missing},
	} {
		_, _, err := New("cs@file", &tc.cfg, zerolog.Nop())
		if err == nil || config.FieldOf(err) != tc.field || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%+v: error %v (on %q), want one on %s naming %s", tc.cfg, err, config.FieldOf(err), tc.field, tc.file)
		}
	}
}

func TestParseDecision(t *testing.T) {
	for _, tc := range []struct {
		d    streamDecision
		want string // prefix, or the error
	}{
		{streamDecision{Scope: "Ip", Type: "ban", Value: "192.0.2.7", Duration: "1h"}, "192.0.2.7/32"},
		{streamDecision{Scope: "ip", Type: "BAN", Value: "::ffff:192.0.2.7", Duration: "1h"}, "192.0.2.7/32"},
		{streamDecision{Scope: "Ip", Type: "ban", Value: "2001:db8::5", Duration: "1h"}, "2001:db8::5/128"},
		{streamDecision{Scope: "Range", Type: "ban", Value: "198.51.100.77/24", Duration: "1h"}, "198.51.100.0/24"},
		{streamDecision{Scope: "Range", Type: "ban", Value: "::ffff:198.51.100.0/120", Duration: "1h"}, "198.51.100.0/24"},
		{streamDecision{Scope: "Range", Type: "ban", Value: "2001:db8:1::/48", Duration: "1h"}, "2001:db8:1::/48"},
		{streamDecision{Scope: "Ip", Type: "captcha", Value: "192.0.2.7", Duration: "1h"}, "not a ban"},
		{streamDecision{Scope: "Country", Type: "ban", Value: "FR", Duration: "1h"}, "scope"},
		{streamDecision{Scope: "Ip", Type: "ban", Value: "192.0.2.0/24", Duration: "1h"}, "value"},
		{streamDecision{Scope: "Ip", Type: "ban", Value: "fe80::1%eth0", Duration: "1h"}, "value"},
		{streamDecision{Scope: "Range", Type: "ban", Value: "300.0.0.0/8", Duration: "1h"}, "value"},
		{streamDecision{Scope: "Ip", Type: "ban", Value: "192.0.2.7", Duration: "forever"}, "duration"},
	} {
		p, _, err := parseDecision(&tc.d)
		got := p.String()
		if err != nil && !errors.Is(err, errDuration) {
			got = err.Error()
		} else if errors.Is(err, errDuration) {
			got = "duration"
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %s, want %s", tc.d, got, tc.want)
		}
	}
}

// newBouncer is a bouncer that is never started: tests feed it answers.
func newBouncer(t testing.TB, mode string) *Bouncer {
	t.Helper()
	b, _, err := New("cs@file", &Config{LapiURL: "http://127.0.0.1:1", APIKey: "k", FailureMode: mode}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feed applies an answer as a pull would.
func feed(t testing.TB, b *Bouncer, startup bool, body string) {
	t.Helper()
	if _, err := b.apply(strings.NewReader(body), startup); err != nil {
		t.Fatalf("apply: %v", err)
	}
	b.ready.Store(true)
}

func ban(scope, value, d string) string {
	return fmt.Sprintf(`{"duration":%q,"id":1,"origin":"cscli","scenario":"manual","scope":%q,"type":"ban","value":%q}`, d, scope, value)
}

func stream(newDs, deleted []string) string {
	list := func(l []string) string {
		if l == nil {
			return "null"
		}
		return "[" + strings.Join(l, ",") + "]"
	}
	return `{"deleted":` + list(deleted) + `,"new":` + list(newDs) + `}`
}

func banned(b *Bouncer, addr string) bool { return !b.Decide(netip.MustParseAddr(addr)).Allow }

func TestApply(t *testing.T) {
	b := newBouncer(t, "")
	if d := b.Decide(netip.MustParseAddr("192.0.2.1")); d.Allow || d.Reason != ReasonNotReady {
		t.Fatalf("closed mode before any pull: %s", d)
	}
	if d := newBouncer(t, "open").Decide(netip.MustParseAddr("192.0.2.1")); !d.Allow || d.Reason != ReasonNotReadyOpen {
		t.Fatalf("open mode before any pull: %s", d)
	}
	// The answer 1.4.6's LAPI gives (captured): a range, an address, IPv6,
	// and a captcha (not applied).
	feed(t, b, true, `{"deleted":null,"new":[
		{"duration":"1h59m58.74568396s","id":2,"origin":"cscli","scenario":"manual 'ban' from 'testm'","scope":"Range","type":"ban","value":"198.51.100.0/24"},
		{"duration":"2h59m59.745681896s","id":5,"origin":"cscli","scenario":"second","scope":"Ip","type":"ban","value":"192.0.2.7"},
		{"duration":"3h59m58.745681054s","id":3,"origin":"cscli","scenario":"manual 'ban' from 'testm'","scope":"Ip","type":"ban","value":"2001:db8::5"},
		{"duration":"3h59m58.745680293s","id":4,"origin":"cscli","scenario":"manual 'captcha' from 'testm'","scope":"Range","type":"captcha","value":"2001:db8:1::/48"}]}`)
	for addr, want := range map[string]bool{
		"192.0.2.7": true, "::ffff:192.0.2.7": true, "192.0.2.8": false,
		"198.51.100.1": true, "198.51.100.255": true, "198.51.101.0": false,
		"2001:db8::5": true, "2001:db8::6": false, "2001:db8:1::1": false,
	} {
		if got := banned(b, addr); got != want {
			t.Errorf("%s: banned %v, want %v", addr, got, want)
		}
	}
	if d := b.Decide(netip.MustParseAddr("198.51.100.9")); d.Reason != ReasonBanned || d.Ban.String() != "198.51.100.0/24" {
		t.Errorf("the decision does not name the range: %+v", d)
	}
	if s := b.Status(); s.Ignored != 1 {
		t.Errorf("status: %+v", s)
	}
	// A delta: deleted first, then new, by value.
	feed(t, b, false, stream([]string{ban("Ip", "192.0.2.7", "1h")}, []string{ban("Ip", "192.0.2.7", "-1ms"), ban("Range", "198.51.100.0/24", "-1s")}))
	if !banned(b, "192.0.2.7") || banned(b, "198.51.100.1") {
		t.Error("deleted-then-new in one answer: 192.0.2.7 should stay banned, 198.51.100.0/24 be lifted")
	}
	feed(t, b, false, stream(nil, []string{ban("Ip", "192.0.2.7", "-1ms")}))
	if banned(b, "192.0.2.7") {
		t.Error("a deleted ban stays")
	}
	// A startup answer replaces everything.
	feed(t, b, true, stream([]string{ban("Range", "10.0.0.0/8", "1h")}, nil))
	if banned(b, "2001:db8::5") || !banned(b, "10.1.2.3") {
		t.Error("a startup pull did not replace the bans")
	}
	// A ban ends with its duration, without a delete.
	feed(t, b, false, stream([]string{ban("Ip", "192.0.2.9", "1500ms")}, nil))
	if !banned(b, "192.0.2.9") {
		t.Fatal("a short ban is not applied")
	}
	itest.Eventually(t, 5*time.Second, func() bool { return !banned(b, "192.0.2.9") }, "a ban outlives its duration")
	// A duration that does not parse: banned until deleted.
	feed(t, b, false, stream([]string{ban("Ip", "192.0.2.10", "soon")}, nil))
	if !banned(b, "192.0.2.10") {
		t.Error("a ban with a duration that does not parse is not applied")
	}
	// Within one answer, the longest ban of a value holds.
	// (the shorter one has ended by the time Decide runs)
	feed(t, b, false, stream([]string{ban("Ip", "192.0.2.11", "1h"), ban("Ip", "192.0.2.11", "1ns")}, nil))
	if !banned(b, "192.0.2.11") {
		t.Error("a shorter ban of the same value in the same answer cut the longer one")
	}
	// An answer that does not decode whole changes nothing.
	if _, err := b.apply(strings.NewReader(`{"new":[`+ban("Ip", "192.0.2.12", "1h")+`,{"value":`), false); err == nil {
		t.Fatal("a truncated answer applied")
	}
	if banned(b, "192.0.2.12") {
		t.Error("a truncated answer changed the bans")
	}
	if s := b.Status(); s.Invalid != 0 {
		t.Errorf("invalid %d", s.Invalid)
	}
}

func TestDecodeStreamRefuses(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"new":{}}`, `{"new":[1]}`, `{"new":null}{}`, `{"new":null`, `{"new":[{"value":"1.2.3.4"}]`} {
		if err := decodeStream(strings.NewReader(body), func(bool, *streamDecision) {}); err == nil {
			t.Errorf("%q decoded", body)
		}
	}
	n := 0
	if err := decodeStream(strings.NewReader(`{"other":{"x":[1,2]},"new":null,"deleted":[]}`), func(bool, *streamDecision) { n++ }); err != nil || n != 0 {
		t.Errorf("unknown keys: %v, %d", err, n)
	}
}

// benchBouncer holds 10,000 banned addresses, 10,000 IPv6 ones and ranges of
// four lengths.
func benchBouncer(t testing.TB) *Bouncer {
	b := newBouncer(t, "")
	var ds []string
	for i := range 10000 {
		ds = append(ds, ban("Ip", netip.AddrFrom4([4]byte{203, byte(i >> 8), byte(i), 1}).String(), "4h"))
		ds = append(ds, ban("Ip", fmt.Sprintf("2001:db8::%x", i), "4h"))
	}
	for _, r := range []string{"198.51.100.0/24", "100.64.0.0/10", "192.0.2.0/28", "2001:db8:1::/48", "2001:db8:2::/64"} {
		ds = append(ds, ban("Range", r, "4h"))
	}
	feed(t, b, true, stream(ds, nil))
	return b
}

func TestDecideDoesNotAllocate(t *testing.T) {
	b := benchBouncer(t)
	addrs := []netip.Addr{netip.MustParseAddr("203.0.1.1"), netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2001:db8::ff"), netip.MustParseAddr("2001:db8:3::1"), netip.MustParseAddr("198.51.100.4")}
	want := []bool{false, true, false, true, false}
	for i, a := range addrs {
		if got := b.Decide(a).Allow; got != want[i] {
			t.Errorf("%s: allow %v", a, got)
		}
	}
	if n := testing.AllocsPerRun(1000, func() {
		for _, a := range addrs {
			_ = b.Decide(a)
		}
	}); n != 0 {
		t.Fatalf("Decide allocates %.1f times", n)
	}
	if s := b.Status(); s.Ignored+s.Invalid != 0 {
		t.Fatalf("status %+v", s)
	}
}

// BenchmarkDecide is the per-connection cost with 20,005 bans in force:
// banned and clean clients, IPv4 and IPv6.
func BenchmarkDecide(b *testing.B) {
	bo := benchBouncer(b)
	addrs := []netip.Addr{netip.MustParseAddr("203.0.1.1"), netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2001:db8::ff"), netip.MustParseAddr("2001:db8:3::1")}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_ = bo.Decide(addrs[i&3])
			i++
		}
	})
}

// FuzzValidate: any block decoded from JSON validates or is refused with an
// error on its field; it never panics, and one that validates has a stream
// URL on http or https and credentials.
func FuzzValidate(f *testing.F) {
	f.Add(`{"lapiURL":"http://127.0.0.1:8080","apiKey":"k","updateInterval":"10s","failureMode":"open"}`)
	f.Add(`{"lapiURL":"https://lapi:8443/x/","tls":{"cert":"c","key":"k","ca":"ca"}}`)
	f.Add(`{"lapiURL":"http://u:p@h","apiKeyFile":"/run/k"}`)
	f.Add(`{"lapiURL":"http://[::1]:8080","apiKey":"a b"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var cfg Config
		if json.Unmarshal([]byte(s), &cfg) != nil {
			return
		}
		st, warns, err := validate(&cfg)
		if err != nil {
			if f := config.FieldOf(err); f == "" || !strings.HasPrefix(err.Error(), f+": ") {
				t.Fatalf("error without its field first: %v", err)
			}
			if cfg.APIKey != "" && len(cfg.APIKey) > 3 && strings.Contains(err.Error(), cfg.APIKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
			return
		}
		for _, w := range warns {
			if config.FieldOf(w) == "" {
				t.Fatalf("warning without a field: %v", w)
			}
		}
		if st.url.Scheme != "http" && st.url.Scheme != "https" || st.url.Host == "" || st.interval <= 0 {
			t.Fatalf("validated %+v", st)
		}
		if st.key == "" && st.keyFile == "" && (st.tls == nil || st.tls.Cert == "") {
			t.Fatal("validated without credentials")
		}
	})
}

// FuzzStream: any answer is applied whole or refused, never a panic; every
// ban it leaves is a masked prefix that Decide finds for its own address.
func FuzzStream(f *testing.F) {
	f.Add(stream([]string{ban("Ip", "192.0.2.7", "1h"), ban("Range", "198.51.100.0/24", "2h")}, []string{ban("Ip", "192.0.2.8", "-1s")}))
	f.Add(stream([]string{ban("Range", "::ffff:10.0.0.0/104", "1h"), ban("Ip", "2001:db8::1", "x")}, nil))
	f.Add(`{"new":[{"scope":"Range","type":"ban","value":"0.0.0.0/0","duration":"1h"}],"deleted":null}`)
	f.Add(`{"new":null,"deleted":null,"extra":[1,{"a":null}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		b := newBouncer(t, "")
		if _, err := b.apply(strings.NewReader(body), true); err != nil {
			return
		}
		b.ready.Store(true)
		for _, ms := range [][]lenMap{b.tab.Load().v4, b.tab.Load().v6} {
			for _, lm := range ms {
				for p, end := range lm.m {
					if !p.IsValid() || p != p.Masked() || p.Bits() != lm.bits || p.Addr().Is4In6() {
						t.Fatalf("stored %v under /%d", p, lm.bits)
					}
					if end > b.now()+int64(time.Second) && b.Decide(p.Addr()).Allow {
						t.Fatalf("%v is banned but Decide admits %v", p, p.Addr())
					}
				}
			}
		}
	})
}
