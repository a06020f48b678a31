package labels

import (
	"maps"
	"testing"
)

func TestTagsToLabels(t *testing.T) {
	tests := []struct {
		name   string
		tags   []string
		prefix string
		want   map[string]string
	}{
		{
			name:   "nil tags",
			prefix: "traefik",
			want:   map[string]string{},
		},
		{
			name:   "default prefix keeps key and value",
			tags:   []string{"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=10"},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount": "10"},
		},
		{
			name:   "empty prefix means traefik",
			tags:   []string{"traefik.enable=true", "other.enable=true"},
			prefix: "",
			want:   map[string]string{"traefik.enable": "true"},
		},
		{
			name:   "custom prefix rewritten to traefik root",
			tags:   []string{"tollgate.tcp.routers.r.rule=HostSNI(`*`)", "traefik.tcp.routers.x.rule=HostSNI(`*`)"},
			prefix: "tollgate",
			want:   map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)"},
		},
		{
			name:   "split on the first equals sign only",
			tags:   []string{"traefik.tcp.routers.r.rule=ClientIP(`10.0.0.1`) && X=Y"},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.routers.r.rule": "ClientIP(`10.0.0.1`) && X=Y"},
		},
		{
			name:   "tags without equals are ignored",
			tags:   []string{"traefik.enable", "primary", "traefik.tcp.routers.r.entrypoints=db"},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.routers.r.entrypoints": "db"},
		},
		{
			name:   "prefix must be followed by a dot",
			tags:   []string{"traefikx.enable=true", "traefik=true", "traefik.=x"},
			prefix: "traefik",
			want:   map[string]string{"traefik.": "x"},
		},
		{
			name:   "prefix is matched case-insensitively",
			tags:   []string{"Traefik.tcp.routers.r.rule=HostSNI(`*`)"},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)"},
		},
		{
			name:   "empty value is kept",
			tags:   []string{"traefik.tcp.routers.r.rule="},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.routers.r.rule": ""},
		},
		{
			name:   "later tag wins",
			tags:   []string{"traefik.tcp.middlewares.m.inflightconn.amount=1", "traefik.tcp.middlewares.m.inflightconn.amount=2"},
			prefix: "traefik",
			want:   map[string]string{"traefik.tcp.middlewares.m.inflightconn.amount": "2"},
		},
		{
			name:   "prefix containing dots",
			tags:   []string{"my.app.tcp.routers.r.rule=HostSNI(`*`)", "my.tcp.routers.x.rule=y"},
			prefix: "my.app",
			want:   map[string]string{"traefik.tcp.routers.r.rule": "HostSNI(`*`)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TagsToLabels(tt.tags, tt.prefix)
			if got == nil {
				t.Fatal("TagsToLabels returned nil, want a non-nil map")
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("TagsToLabels(%q, %q) = %v, want %v", tt.tags, tt.prefix, got, tt.want)
			}
		})
	}
}

func TestTagsToLabelsThenDecode(t *testing.T) {
	tags := []string{
		"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=10",
		"traefik.tcp.routers.r.rule=HostSNI(`*`)",
		"primary",
	}
	conf, err := Decode(TagsToLabels(tags, "traefik"))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	mw := conf.TCP.Middlewares["test-inflightconn"]
	if mw == nil || mw.InFlightConn == nil || mw.InFlightConn.Amount != 10 {
		t.Fatalf("middleware test-inflightconn = %+v, want inFlightConn amount 10", mw)
	}
}

// Consul tags carry rateLimit like labels (the same decoder).
func TestTagsRateLimit(t *testing.T) {
	conf, err := Decode(TagsToLabels([]string{
		"traefik.tcp.middlewares.rl.ratelimit.average=100",
		"traefik.tcp.middlewares.rl.ratelimit.period=1m",
		"traefik.tcp.middlewares.rl.ratelimit.burst=50",
	}, "traefik"))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	rl := conf.TCP.Middlewares["rl"].RateLimit
	if rl == nil || rl.Average != 100 || rl.Period == nil || rl.Period.String() != "1m0s" || rl.Burst == nil || *rl.Burst != 50 {
		t.Fatalf("rateLimit = %+v, want average 100 per 1m, burst 50", rl)
	}
}
