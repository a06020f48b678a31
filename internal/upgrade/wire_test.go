package upgrade

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/middleware/inflightconn"
	"github.com/tollgate-proxy/tollgate/middleware/ratelimit"
)

func sampleSnapshot() Snapshot {
	return Snapshot{
		Limiters: []inflightconn.Export{
			{Name: "limit@file", Amount: 5, Admitted: 7, Rejected: 2, Keys: []inflightconn.KeyCount{
				{Key: netip.MustParseAddr("127.0.0.2"), Count: 5}, {Key: netip.MustParseAddr("2001:db8::1"), Count: 1}}},
			{Name: "dry@docker", Amount: 0, DryRun: true, V6Bits: 64, Keys: []inflightconn.KeyCount{}},
		},
		WithRates: true,
		Rates: []ratelimit.Export{
			{Name: "rate@file", Interval: 50 * time.Millisecond, Admitted: 30, Rejected: 4, Keys: []ratelimit.KeyDebt{
				{Key: netip.MustParseAddr("127.0.0.2"), Ahead: 120 * time.Millisecond}, {Key: netip.MustParseAddr("2001:db8::"), Ahead: time.Nanosecond}}},
			{Name: "off@docker", V6Bits: 48, Keys: []ratelimit.KeyDebt{}},
		},
		WithCaps: true,
		Caps: []CapExport{
			{Service: "pg@file", Servers: []CapCount{{Address: "10.0.0.5:5432", Open: 90}, {Address: "db:5432", Open: 1}, {Address: "idle:5432"}}},
			{Service: "idle@docker"},
		},
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, form := range []struct{ rates, caps bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		in := sampleSnapshot()
		if !form.rates {
			in.WithRates, in.Rates = false, nil
		}
		if !form.caps {
			in.WithCaps, in.Caps = false, nil
		}
		b, err := encodeSnapshot(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decodeSnapshot(b, form.rates, form.caps)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip (%+v):\n got %+v\nwant %+v", form, out, in)
		}
		// Every truncation is an error, never a shorter snapshot.
		for n := 0; n < len(b); n++ {
			if _, err := decodeSnapshot(b[:n], form.rates, form.caps); err == nil {
				t.Fatalf("a snapshot cut at %d of %d bytes decoded (%+v)", n, len(b), form)
			}
		}
		if _, err := decodeSnapshot(append(b, 0), form.rates, form.caps); err == nil {
			t.Fatal("trailing bytes decoded")
		}
		// The sections must be what the old process said it sends: a
		// snapshot with a section read as one without has trailing bytes,
		// one without read as one with is cut short.
		for _, other := range []struct{ rates, caps bool }{{!form.rates, form.caps}, {form.rates, !form.caps}} {
			if _, err := decodeSnapshot(b, other.rates, other.caps); err == nil {
				t.Fatalf("a snapshot of form %+v decoded as %+v", form, other)
			}
		}
	}
}

// Values a process never sends are refused: a negative count would release
// more than was counted, a negative amount is not a limit, a debt that is
// not positive or has no interval means nothing.
func TestSnapshotRefusesBadValues(t *testing.T) {
	k := netip.MustParseAddr("10.0.0.1")
	for name, snap := range map[string]Snapshot{
		"negative count":         {Limiters: []inflightconn.Export{{Name: "m", Amount: 1, Keys: []inflightconn.KeyCount{{Key: k, Count: -1}}}}},
		"zero count":             {Limiters: []inflightconn.Export{{Name: "m", Amount: 1, Keys: []inflightconn.KeyCount{{Key: k, Count: 0}}}}},
		"negative amount":        {Limiters: []inflightconn.Export{{Name: "m", Amount: -3}}},
		"no name":                {Limiters: []inflightconn.Export{{Name: "", Amount: 1}}},
		"subnet 129":             {Limiters: []inflightconn.Export{{Name: "m", Amount: 1, V6Bits: 129}}},
		"rate without name":      {WithRates: true, Rates: []ratelimit.Export{{Interval: time.Second}}},
		"rate subnet 129":        {WithRates: true, Rates: []ratelimit.Export{{Name: "r", V6Bits: 129, Interval: time.Second}}},
		"debt without a rate":    {WithRates: true, Rates: []ratelimit.Export{{Name: "r", Keys: []ratelimit.KeyDebt{{Key: k, Ahead: time.Second}}}}},
		"zero debt":              {WithRates: true, Rates: []ratelimit.Export{{Name: "r", Interval: time.Second, Keys: []ratelimit.KeyDebt{{Key: k}}}}},
		"negative debt":          {WithRates: true, Rates: []ratelimit.Export{{Name: "r", Interval: time.Second, Keys: []ratelimit.KeyDebt{{Key: k, Ahead: -time.Second}}}}},
		"negative interval":      {WithRates: true, Rates: []ratelimit.Export{{Name: "r", Interval: -time.Second}}},
		"debt of a century":      {WithRates: true, Rates: []ratelimit.Export{{Name: "r", Interval: time.Second, Keys: []ratelimit.KeyDebt{{Key: k, Ahead: time.Duration(math.MaxInt64)}}}}},
		"service without name":   {WithCaps: true, Caps: []CapExport{{Servers: []CapCount{{Address: "a:1", Open: 1}}}}},
		"server without address": {WithCaps: true, Caps: []CapExport{{Service: "s", Servers: []CapCount{{Open: 1}}}}},
	} {
		b, err := encodeSnapshot(snap)
		if err != nil {
			continue
		}
		if _, err := decodeSnapshot(b, snap.WithRates, snap.WithCaps); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// A limiter the snapshot cannot hold is named with its kind.
func TestSnapshotNamesTheKind(t *testing.T) {
	long := strings.Repeat("n", maxName+1)
	for kind, snap := range map[string]Snapshot{
		"inFlightConn": {Limiters: []inflightconn.Export{{Name: long, Amount: 1}}},
		"rateLimit":    {WithRates: true, Rates: []ratelimit.Export{{Name: long, Interval: time.Second}}},
	} {
		if _, err := encodeSnapshot(snap); err == nil || !strings.HasPrefix(err.Error(), kind+` "nnn`) {
			t.Errorf("%s: %v", kind, err)
		}
	}
}

func TestFramesAndBatches(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	k4, k6 := netip.MustParseAddr("127.0.0.9"), netip.MustParseAddr("::ffff:10.1.2.3")
	rel := appendRelease(appendRelease(nil, release{1, k4}), release{2, netip.MustParseAddr("2001:db8::5")})
	acq := appendAcquire(nil, acquire{77, 3, k6})
	gr := appendGrant(appendGrant(nil, grant{77, true}), grant{78, false})
	for _, f := range []struct {
		t byte
		b []byte
	}{{msgReleases, rel}, {msgAcquires, acq}, {msgGrants, gr}, {msgCapReleases, appendCapRelease(appendCapRelease(nil, capRelease{0, 1}), capRelease{65535, 0})}, {msgCapAcquires, appendCapRelease(nil, capRelease{2, 3})}, {msgBye, nil}} {
		if err := writeFrame(w, f.t, f.b); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Flush()
	r := bufio.NewReader(&buf)
	typ, p, err := readFrame(r)
	if err != nil || typ != msgReleases {
		t.Fatal(typ, err)
	}
	var rels []release
	if err := decodeReleases(p, func(m release) error { rels = append(rels, m); return nil }); err != nil || len(rels) != 2 || rels[0] != (release{1, k4}) {
		t.Fatalf("releases %v %v", rels, err)
	}
	_, p, _ = readFrame(r)
	var acqs []acquire
	if err := decodeAcquires(p, func(m acquire) { acqs = append(acqs, m) }); err != nil || len(acqs) != 1 || acqs[0].key != k6.Unmap() || acqs[0].seq != 77 {
		t.Fatalf("acquires %v %v (a mapped key must come back unmapped)", acqs, err)
	}
	_, p, _ = readFrame(r)
	var grs []grant
	if err := decodeGrants(p, func(m grant) { grs = append(grs, m) }); err != nil || !reflect.DeepEqual(grs, []grant{{77, true}, {78, false}}) {
		t.Fatalf("grants %v %v", grs, err)
	}
	_, p, _ = readFrame(r)
	var caps []capRelease
	if err := decodeCapReleases(p, func(m capRelease) error { caps = append(caps, m); return nil }); err != nil || !reflect.DeepEqual(caps, []capRelease{{0, 1}, {65535, 0}}) {
		t.Fatalf("capacity releases %v %v", caps, err)
	}
	if err := decodeCapReleases(p[:3], func(capRelease) error { return nil }); err == nil {
		t.Fatal("a capacity release cut short decoded")
	}
	if typ, p, err := readFrame(r); typ != msgCapAcquires || err != nil || decodeCapReleases(p, func(m capRelease) error {
		if m != (capRelease{2, 3}) {
			t.Fatalf("capacity acquire %v", m)
		}
		return nil
	}) != nil {
		t.Fatal("capacity acquires", typ, err)
	}
	if typ, p, err := readFrame(r); typ != msgBye || len(p) != 0 || err != nil {
		t.Fatal("bye", typ, p, err)
	}
	// A length past the bound is refused before anything is allocated.
	var h [5]byte
	h[0] = msgSnapshot
	binary.BigEndian.PutUint32(h[1:], maxFrame+1)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(h[:]))); !errors.Is(err, errFrame) {
		t.Fatalf("oversized frame: %v", err)
	}
}

func TestRecordEndSplitsOnRecords(t *testing.T) {
	var b []byte
	for i := 0; i < 1000; i++ {
		b = appendRelease(b, release{uint16(i), netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})})
		b = appendRelease(b, release{uint16(i), netip.MustParseAddr("2001:db8::1")})
	}
	n := recordEnd(msgReleases, b, 1000)
	if n > 1000 || n == 0 {
		t.Fatalf("cut at %d", n)
	}
	if err := decodeReleases(b[:n], func(release) error { return nil }); err != nil {
		t.Fatalf("a batch cut by recordEnd does not decode: %v", err)
	}
}

// FuzzStateChannel feeds arbitrary bytes to every decoder of the state
// channel: none may panic, and a snapshot that decodes encodes back to
// bytes that decode to the same snapshot.
func FuzzStateChannel(f *testing.F) {
	snap, _ := encodeSnapshot(sampleSnapshot())
	var frames bytes.Buffer
	w := bufio.NewWriter(&frames)
	_ = writeFrame(w, msgSnapshot, snap)
	_ = writeFrame(w, msgReleases, appendRelease(nil, release{0, netip.MustParseAddr("127.0.0.2")}))
	_ = writeFrame(w, msgAcquires, appendAcquire(nil, acquire{1, 0, netip.MustParseAddr("::1")}))
	_ = writeFrame(w, msgGrants, appendGrant(nil, grant{1, true}))
	_ = writeFrame(w, msgCapReleases, appendCapRelease(nil, capRelease{0, 0}))
	_ = writeFrame(w, msgHello, []byte(`{"version":1,"generation":2,"pid":10,"listeners":[{"name":"db","address":":5432","fd":4}],"connsFd":5}`))
	_ = w.Flush()
	f.Add(frames.Bytes())
	f.Add(snap)
	f.Add([]byte{msgHello, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for i := 0; i < 16; i++ {
			typ, p, err := readFrame(r)
			if err != nil {
				break
			}
			fuzzPayload(t, typ, p)
		}
		fuzzPayload(t, msgSnapshot, data)
		fuzzPayload(t, msgReleases, data)
		fuzzPayload(t, msgAcquires, data)
		fuzzPayload(t, msgGrants, data)
		fuzzPayload(t, msgCapReleases, data)
		fuzzPayload(t, msgHello, data)
	})
}

func fuzzPayload(t *testing.T, typ byte, p []byte) {
	switch typ {
	case msgSnapshot:
		for _, form := range []struct{ rates, caps bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			snap, err := decodeSnapshot(p, form.rates, form.caps)
			if err != nil {
				continue
			}
			for _, ex := range snap.Limiters {
				for _, kc := range ex.Keys {
					if kc.Count <= 0 || !kc.Key.IsValid() || kc.Key.Is4In6() {
						t.Fatalf("decoded key %v count %d", kc.Key, kc.Count)
					}
				}
				if ex.Amount < 0 || ex.V6Bits > 128 {
					t.Fatalf("decoded %+v", ex)
				}
			}
			for _, ex := range snap.Rates {
				for _, kd := range ex.Keys {
					if kd.Ahead <= 0 || kd.Ahead > maxAhead || !kd.Key.IsValid() || kd.Key.Is4In6() {
						t.Fatalf("decoded rate key %v ahead %v", kd.Key, kd.Ahead)
					}
				}
				if ex.V6Bits > 128 || ex.Interval < 0 || (len(ex.Keys) > 0 && ex.Interval == 0) {
					t.Fatalf("decoded %+v", ex)
				}
			}
			for _, ex := range snap.Caps {
				for _, c := range ex.Servers {
					if c.Address == "" {
						t.Fatalf("decoded capacity %+v", ex)
					}
				}
				if ex.Service == "" {
					t.Fatalf("decoded capacity %+v", ex)
				}
			}
			if snap.WithRates != form.rates || snap.WithCaps != form.caps {
				t.Fatalf("decoded sections rates %v caps %v, asked %+v", snap.WithRates, snap.WithCaps, form)
			}
			b, err := encodeSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			again, err := decodeSnapshot(b, form.rates, form.caps)
			if err != nil || !reflect.DeepEqual(snap, again) {
				t.Fatalf("re-encoded snapshot differs: %v", err)
			}
		}
	case msgReleases:
		_ = decodeReleases(p, func(m release) error {
			if !m.key.IsValid() {
				t.Fatal("invalid key decoded")
			}
			return nil
		})
	case msgAcquires:
		_ = decodeAcquires(p, func(acquire) {})
	case msgGrants:
		_ = decodeGrants(p, func(grant) {})
	case msgCapReleases:
		_ = decodeCapReleases(p, func(capRelease) error { return nil })
	case msgHello:
		if h, err := decodeHello(p); err == nil {
			for _, l := range h.Listeners {
				if l.FD < 3 || l.Name == "" || l.FD == h.ConnsFD {
					t.Fatalf("hello listener %+v accepted (connection channel on %d)", l, h.ConnsFD)
				}
			}
			if h.ConnsFD != 0 && h.ConnsFD < 3 {
				t.Fatalf("hello with the connection channel on descriptor %d accepted", h.ConnsFD)
			}
		}
	}
}
