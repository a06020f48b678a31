package metrics

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	"github.com/influxdata/influxdb-client-go/v2/api"
	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tollgate-proxy/tollgate/config"
)

// influxPrefix is the prefix of Traefik's InfluxDB measurements.
const influxPrefix = "traefik."

// influxPusher writes Traefik's global series to InfluxDB v2 with its
// official client, one blocking write of line protocol per push. Points are
// as Traefik's: a measurement per series, its labels and additionalLabels
// as tags, a gauge's value in field "value", and a counter's increase since
// the last push in field "count" (no point when it did not increase).
type influxPusher struct {
	client influxdb2.Client
	w      api.WriteAPIBlocking
	tags   map[string]string
	sent   uint64
}

func newInfluxDB2(cfg *config.InfluxDB2) (*influxPusher, error) {
	token, err := fileOrContent(cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("metrics.influxDB2.token: %w", err)
	}
	opts := influxdb2.DefaultOptions().SetHTTPRequestTimeout(uint(max(time.Duration(cfg.PushInterval), time.Second) / time.Second))
	c := influxdb2.NewClientWithOptions(cfg.Address, token, opts)
	return &influxPusher{client: c, w: c.WriteAPIBlocking(cfg.Org, cfg.Bucket), tags: cfg.AdditionalLabels}, nil
}

// fileOrContent is Traefik's reading of a secret option: the content of the
// file it names when there is one, else the value itself.
func fileOrContent(v string) (string, error) {
	if _, err := os.Stat(v); err != nil {
		return v, nil //nolint:nilerr // no such file: the value is the secret itself
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (p *influxPusher) point(name string, labels map[string]string, field string, v float64, now time.Time) *write.Point {
	tags := maps.Clone(p.tags)
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, labels)
	return influxdb2.NewPoint(influxPrefix+name, tags, map[string]any{field: v}, now)
}

func (p *influxPusher) push(ctx context.Context, s Snapshot) error {
	now := time.Now()
	var pts []*write.Point
	delta := uint64(0)
	if s.Reloads > p.sent {
		delta = s.Reloads - p.sent
		pts = append(pts, p.point(NameReloads, nil, "count", float64(delta), now))
	}
	if !s.LastReload.IsZero() {
		pts = append(pts, p.point(NameLastReload, nil, "value", float64(s.LastReload.Unix()), now))
	}
	for _, e := range s.Open {
		pts = append(pts, p.point(NameOpen, map[string]string{"entrypoint": e.EntryPoint, "protocol": "TCP"}, "value", float64(e.Connections), now))
	}
	for _, c := range s.Certificates {
		pts = append(pts, p.point(NameCertExpiry, map[string]string{"cn": c.CN, "serial": c.Serial, "sans": c.SANs}, "value", float64(c.NotAfter.Unix()), now))
	}
	if len(pts) == 0 {
		return nil
	}
	if err := p.w.WritePoint(ctx, pts...); err != nil {
		return err
	}
	p.sent += delta
	return nil
}

func (p *influxPusher) close(context.Context) error {
	p.client.Close()
	return nil
}
