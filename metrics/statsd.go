package metrics

import (
	"context"
	"io"
	"net"
	"time"

	gokit "github.com/go-kit/kit/metrics"
	"github.com/go-kit/kit/metrics/dogstatsd"
	"github.com/go-kit/kit/metrics/statsd"
	gokitlog "github.com/go-kit/log"

	"github.com/tollgate-proxy/tollgate/config"
)

// statsdPusher sends Traefik's global series over StatsD or DogStatsD with
// go-kit's clients, Traefik's own: each push sets the gauges, adds the
// reloads since the last push to the counter, and writes one line per
// series, one datagram per line. DogStatsD carries Traefik's labels as
// tags; StatsD has none, so it sends the open connections of every entry
// point together and the earliest certificate expiry.
type statsdPusher struct {
	network, address string
	conn             net.Conn // nil until dialled, and after a write failed
	writeTo          func(io.Writer) (int64, error)
	tags             bool

	reloads                  gokit.Counter
	lastReload, open, expiry gokit.Gauge
	sent                     uint64 // reloads already added to the counter
}

func newDatadog(cfg *config.Datadog) *statsdPusher {
	network, addr := config.DialNetwork(cfg.Address)
	d := dogstatsd.New(cfg.Prefix+".", gokitlog.NewNopLogger())
	return &statsdPusher{
		network: network, address: addr, writeTo: d.WriteTo, tags: true,
		reloads:    d.NewCounter(NameReloads, 1),
		lastReload: d.NewGauge(NameLastReload),
		open:       d.NewGauge(NameOpen),
		expiry:     d.NewGauge(NameCertExpiry),
	}
}

func newStatsd(cfg *config.Statsd) *statsdPusher {
	network, addr := config.DialNetwork(cfg.Address)
	s := statsd.New(cfg.Prefix+".", gokitlog.NewNopLogger())
	return &statsdPusher{
		network: network, address: addr, writeTo: s.WriteTo,
		reloads:    s.NewCounter(NameReloads, 1),
		lastReload: s.NewGauge(NameLastReload),
		open:       s.NewGauge(NameOpen),
		expiry:     s.NewGauge(NameCertExpiry),
	}
}

func (p *statsdPusher) push(_ context.Context, s Snapshot) error {
	if s.Reloads > p.sent {
		p.reloads.Add(float64(s.Reloads - p.sent))
		p.sent = s.Reloads
	}
	if !s.LastReload.IsZero() {
		p.lastReload.Set(float64(s.LastReload.Unix()))
	}
	if p.tags {
		for _, e := range s.Open {
			p.open.With("entrypoint", e.EntryPoint, "protocol", "TCP").Set(float64(e.Connections))
		}
		for _, c := range s.Certificates {
			p.expiry.With("cn", c.CN, "serial", c.Serial, "sans", c.SANs).Set(float64(c.NotAfter.Unix()))
		}
	} else {
		p.open.Set(float64(s.TotalOpen()))
		if first := s.FirstExpiry(); !first.IsZero() {
			p.expiry.Set(float64(first.Unix()))
		}
	}
	if p.conn == nil {
		c, err := net.DialTimeout(p.network, p.address, 5*time.Second)
		if err != nil {
			// The lines stay in the client until the next push.
			return err
		}
		p.conn = c
	}
	w := &datagrams{c: p.conn}
	if _, err := p.writeTo(w); err != nil {
		return err
	}
	if w.err != nil {
		// A refused datagram (nothing listening) or a socket that went
		// away: dial again next time. What was written is lost, as with any
		// datagram.
		_ = p.conn.Close()
		p.conn = nil
		return w.err
	}
	return nil
}

func (p *statsdPusher) close(context.Context) error {
	if p.conn != nil {
		return p.conn.Close()
	}
	return nil
}

// datagrams writes each line the client prints as a datagram of its own,
// going on past a failed one (a UDP socket reports an earlier datagram's
// refusal on a later write) and keeping the first error.
type datagrams struct {
	c   net.Conn
	err error
}

func (d *datagrams) Write(b []byte) (int, error) {
	if _, err := d.c.Write(b); err != nil && d.err == nil {
		d.err = err
	}
	return len(b), nil
}
