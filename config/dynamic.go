// Package config holds tollgate's plain configuration types: the static
// configuration read once at start (static.go) and the dynamic TCP
// configuration that providers produce and the proxy compiles (this file).
//
// The types are values with no behaviour beyond defaults and validation; they
// do no I/O and import nothing from the runtime. Field names follow Traefik v3's
// TCP configuration so that files, labels and tags written for Traefik decode
// unchanged (paerser matches them case-insensitively).
package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
)

// Dynamic is one complete dynamic configuration: what a provider emits and what
// the watcher merges. A nil TCP section means "nothing".
type Dynamic struct {
	TCP *TCPConfiguration `json:"tcp,omitempty" toml:"tcp,omitempty" yaml:"tcp,omitempty" export:"true"`
	TLS *TLSConfiguration `json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
}

// AddResources adds to d the routers, services, middlewares, servers
// transports, TLS option sets, stores and certificates of src, where a
// configuration is decoded one resource at a time (a name in both takes
// src's). src is not modified; d shares its values.
func (d *Dynamic) AddResources(src *Dynamic) {
	if t := src.TCP; t != nil {
		if d.TCP == nil {
			d.TCP = &TCPConfiguration{}
		}
		d.TCP.Routers = addAll(d.TCP.Routers, t.Routers)
		d.TCP.Services = addAll(d.TCP.Services, t.Services)
		d.TCP.Middlewares = addAll(d.TCP.Middlewares, t.Middlewares)
		d.TCP.ServersTransports = addAll(d.TCP.ServersTransports, t.ServersTransports)
	}
	if t := src.TLS; t != nil {
		if d.TLS == nil {
			d.TLS = &TLSConfiguration{}
		}
		d.TLS.Options = addAll(d.TLS.Options, t.Options)
		d.TLS.Stores = addAll(d.TLS.Stores, t.Stores)
		d.TLS.Certificates = append(d.TLS.Certificates, t.Certificates...)
	}
}

func addAll[V any](dst, src map[string]V) map[string]V {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]V, len(src))
	}
	maps.Copy(dst, src)
	return dst
}

// TCPConfiguration is the Traefik `tcp` section. Map keys are resource names:
// bare in provider output, qualified (`name@provider`) once merged by the watcher.
type TCPConfiguration struct {
	Routers     map[string]*TCPRouter     `json:"routers,omitempty" toml:"routers,omitempty" yaml:"routers,omitempty" export:"true"`
	Services    map[string]*TCPService    `json:"services,omitempty" toml:"services,omitempty" yaml:"services,omitempty" export:"true"`
	Middlewares map[string]*TCPMiddleware `json:"middlewares,omitempty" toml:"middlewares,omitempty" yaml:"middlewares,omitempty" export:"true"`
	// ServersTransports are how services dial their servers, by name.
	// Not in labels or tags (Traefik v3: files, KV stores, CRDs).
	ServersTransports map[string]*TCPServersTransport `json:"serversTransports,omitempty" toml:"serversTransports,omitempty" yaml:"serversTransports,omitempty" label:"-" export:"true"`
	// TLS is every provider's Dynamic.TLS merged, set by the watcher's
	// Merge only: a provider writes TLS at the top level, as in Traefik.
	TLS *TLSConfiguration `json:"tls,omitempty" toml:"-" yaml:"-" label:"-" file:"-"`
}

// TCPRouter matches connections accepted on its entry points and hands them,
// through its middlewares in order, to its service. An empty EntryPoints means
// every entry point; an empty Rule drops the router.
type TCPRouter struct {
	EntryPoints []string `json:"entryPoints,omitempty" toml:"entryPoints,omitempty" yaml:"entryPoints,omitempty" export:"true"`
	Middlewares []string `json:"middlewares,omitempty" toml:"middlewares,omitempty" yaml:"middlewares,omitempty" export:"true"`
	Service     string   `json:"service,omitempty" toml:"service,omitempty" yaml:"service,omitempty" export:"true"`
	Rule        string   `json:"rule,omitempty" toml:"rule,omitempty" yaml:"rule,omitempty"`
	Priority    int      `json:"priority,omitempty" toml:"priority,omitempty,omitzero" yaml:"priority,omitempty" export:"true"`
	// RuleSyntax is Traefik v3's ruleSyntax: rules are read in v3 syntax;
	// v2 is accepted with a warning (single-value HostSNI and ClientIP read
	// the same in both), anything else disables the router.
	RuleSyntax string              `json:"ruleSyntax,omitempty" toml:"ruleSyntax,omitempty" yaml:"ruleSyntax,omitempty" export:"true"`
	TLS        *RouterTCPTLSConfig `json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// RouterTCPTLSConfig is a router's TLS section: passthrough (route on the
// ClientHello's SNI, replay the bytes) or, without it, termination with a
// certificate chosen by SNI and the TLS options named by Options
// (`default` when empty). `tls=true` in labels creates the section with
// Passthrough false.
type RouterTCPTLSConfig struct {
	Passthrough  bool     `json:"passthrough" toml:"passthrough" yaml:"passthrough" export:"true"`
	Options      string   `json:"options,omitempty" toml:"options,omitempty" yaml:"options,omitempty" export:"true"`
	CertResolver string   `json:"certResolver,omitempty" toml:"certResolver,omitempty" yaml:"certResolver,omitempty" export:"true"`
	Domains      []Domain `json:"domains,omitempty" toml:"domains,omitempty" yaml:"domains,omitempty" export:"true"`
}

// TCPService is exactly one of LoadBalancer or Weighted.
type TCPService struct {
	LoadBalancer *TCPServersLoadBalancer `json:"loadBalancer,omitempty" toml:"loadBalancer,omitempty" yaml:"loadBalancer,omitempty" export:"true"`
	Weighted     *TCPWeightedRoundRobin  `json:"weighted,omitempty" toml:"weighted,omitempty" yaml:"weighted,omitempty" label:"-" export:"true"`
}

// TCPServersLoadBalancer spreads connections round-robin over Servers.
type TCPServersLoadBalancer struct {
	Servers []TCPServer `json:"servers,omitempty" toml:"servers,omitempty" yaml:"servers,omitempty" label-slice-as-struct:"server" export:"true"`
	// ServersTransport names the tcp.serversTransports entry the servers
	// are dialled with (qualified like a service reference).
	ServersTransport string `json:"serversTransport,omitempty" toml:"serversTransport,omitempty" yaml:"serversTransport,omitempty" export:"true"`
	// ProxyProtocol, when set, sends a PROXY header of that version to each
	// server. Deprecated in Traefik v3 for ServersTransport's;
	// docs/reference/servers-transports.md says how the two resolve.
	ProxyProtocol *ProxyProtocol `json:"proxyProtocol,omitempty" toml:"proxyProtocol,omitempty" yaml:"proxyProtocol,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// TerminationDelay is how long, in milliseconds, the other direction may go on
	// after one side closed its write half. Nil means 100 ms; a negative value waits
	// without limit.
	TerminationDelay *int `json:"terminationDelay,omitempty" toml:"terminationDelay,omitempty" yaml:"terminationDelay,omitempty" export:"true"`
	// HealthCheck probes the servers; an empty section (`healthCheck: {}`,
	// `...loadbalancer.healthcheck=true` in labels) checks with the
	// defaults, as in Traefik.
	HealthCheck *TCPHealthCheck `json:"healthCheck,omitempty" toml:"healthCheck,omitempty" yaml:"healthCheck,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
	// Queue is where connections wait when every server is at its maxConn
	// (a tollgate extension). Without it, a capped service queues up to
	// 100 connections for up to 5 s.
	Queue *TCPQueue `json:"queue,omitempty" toml:"queue,omitempty" yaml:"queue,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// TCPQueue bounds the wait for a server slot: at most MaxSize connections
// wait (0: none does; a connection over the caps is refused at once), each
// for at most Timeout.
type TCPQueue struct {
	MaxSize *int     `json:"maxSize,omitempty" toml:"maxSize,omitempty" yaml:"maxSize,omitempty" export:"true"`
	Timeout Duration `json:"timeout,omitempty" toml:"timeout,omitempty" yaml:"timeout,omitempty" export:"true"`
}

// Mergeable reports whether lb and other describe the same load balancer apart
// from their servers, so that two definitions of one service name (two
// containers, two catalog instances) can pool their servers (Traefik's
// TCPServersLoadBalancer.Mergeable). Two nil load balancers are mergeable; a
// nil and a non-nil one are not. Neither is modified.
func (lb *TCPServersLoadBalancer) Mergeable(other *TCPServersLoadBalancer) bool {
	if lb == nil || other == nil {
		return lb == other
	}
	a, b := *lb, *other
	a.Servers, b.Servers = nil, nil
	return reflect.DeepEqual(a, b)
}

// DefaultTerminationDelayMillis is the termination delay when none is configured.
const DefaultTerminationDelayMillis = 100

// TCPServer is one backend address. In labels only Port is read (the address
// comes from the container or the catalog).
type TCPServer struct {
	Address string `json:"address,omitempty" toml:"address,omitempty" yaml:"address,omitempty" label:"-"`
	Port    string `json:"-" toml:"-" yaml:"-" file:"-"`
	// MaxConn caps the connections open to this server at once (HAProxy's
	// maxconn; a tollgate extension); over the cap, a connection waits in
	// the service's queue. 0 means no cap.
	MaxConn int `json:"maxConn,omitempty" toml:"maxConn,omitempty,omitzero" yaml:"maxConn,omitempty" export:"true"`
	// TLS dials this server with TLS, configured by the load balancer's
	// servers transport (Traefik v3's `servers[].tls`,
	// `loadbalancer.server.tls` in labels).
	TLS bool `json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
}

// ProxyProtocol selects the PROXY protocol version sent to servers (1 or 2).
type ProxyProtocol struct {
	Version int `json:"version,omitempty" toml:"version,omitempty" yaml:"version,omitempty" export:"true"`
}

// SetDefaults makes `proxyProtocol=true` mean version 2, as in Traefik.
func (p *ProxyProtocol) SetDefaults() { p.Version = 2 }

// TCPHealthCheck probes each server with a TCP connection (optionally sending
// Send and expecting a reply that starts with Expect), Traefik v3.6's
// TCPServerHealthCheck. Zero durations take the defaults
// docs/reference/services.md gives (Traefik's).
type TCPHealthCheck struct {
	// Interval is the time between two probes of a server that is UP.
	Interval Duration `json:"interval,omitempty" toml:"interval,omitempty" yaml:"interval,omitempty" export:"true"`
	// UnhealthyInterval is the time between two probes of a server that is
	// DOWN; nil means Interval.
	UnhealthyInterval *Duration `json:"unhealthyInterval,omitempty" toml:"unhealthyInterval,omitempty" yaml:"unhealthyInterval,omitempty" export:"true"`
	Timeout           Duration  `json:"timeout,omitempty" toml:"timeout,omitempty" yaml:"timeout,omitempty" export:"true"`
	Port              int       `json:"port,omitempty" toml:"port,omitempty,omitzero" yaml:"port,omitempty" export:"true"`
	Send              string    `json:"send,omitempty" toml:"send,omitempty" yaml:"send,omitempty" export:"true"`
	Expect            string    `json:"expect,omitempty" toml:"expect,omitempty" yaml:"expect,omitempty" export:"true"`
}

// TCPWeightedRoundRobin spreads connections over other services by weight.
type TCPWeightedRoundRobin struct {
	Services []TCPWRRService `json:"services,omitempty" toml:"services,omitempty" yaml:"services,omitempty" export:"true"`
	// HealthCheck (`healthCheck: {}`, Traefik v3.6's weighted health
	// check) requires every member to be health-checked itself, as Traefik
	// does (docs/reference/services.md).
	HealthCheck *TCPWeightedHealthCheck `json:"healthCheck,omitempty" toml:"healthCheck,omitempty" yaml:"healthCheck,omitempty" label:"allowEmpty" file:"allowEmpty" export:"true"`
}

// TCPWeightedHealthCheck is a weighted service's health check: it has no
// fields (Traefik's HealthCheck struct{}).
type TCPWeightedHealthCheck struct{}

// TCPWRRService is one weighted member. A nil Weight means 1; 0 gets nothing.
type TCPWRRService struct {
	Name   string `json:"name,omitempty" toml:"name,omitempty" yaml:"name,omitempty" export:"true"`
	Weight *int   `json:"weight,omitempty" toml:"weight,omitempty" yaml:"weight,omitempty" export:"true"`
}

// TCPMiddleware holds exactly one middleware type.
type TCPMiddleware struct {
	InFlightConn *TCPInFlightConn `json:"inFlightConn,omitempty" toml:"inFlightConn,omitempty" yaml:"inFlightConn,omitempty" export:"true"`
	IPAllowList  *TCPIPAllowList  `json:"ipAllowList,omitempty" toml:"ipAllowList,omitempty" yaml:"ipAllowList,omitempty" export:"true"`
	// IPWhiteList is Traefik v2's name for IPAllowList, which Traefik v3
	// still reads with a deprecation warning. Deprecated: read it through
	// AllowList, which applies it as IPAllowList; Deprecations says so.
	IPWhiteList *TCPIPAllowList `json:"ipWhiteList,omitempty" toml:"ipWhiteList,omitempty" yaml:"ipWhiteList,omitempty" export:"true"`
	RateLimit   *TCPRateLimit   `json:"rateLimit,omitempty" toml:"rateLimit,omitempty" yaml:"rateLimit,omitempty" export:"true"`
	// GeoIP and CrowdSec decide at accept who may connect at all, by where
	// a database places the client (geoip.go) and by a CrowdSec Local API's
	// bans (crowdsec.go).
	GeoIP    *TCPGeoIP    `json:"geoIP,omitempty" toml:"geoIP,omitempty" yaml:"geoIP,omitempty" export:"true"`
	CrowdSec *TCPCrowdSec `json:"crowdSec,omitempty" toml:"crowdSec,omitempty" yaml:"crowdSec,omitempty" export:"true"`
}

// AllowList returns the middleware's allow list and the key it was written
// under: ipAllowList, else its deprecated name ipWhiteList (nil and "" when
// it has neither). This is the one place that reads IPWhiteList.
func (m *TCPMiddleware) AllowList() (*TCPIPAllowList, string) {
	switch {
	case m.IPAllowList != nil:
		return m.IPAllowList, "ipAllowList"
	case m.IPWhiteList != nil:
		return m.IPWhiteList, "ipWhiteList"
	}
	return nil, ""
}

// Conflict returns the error of keys m is written with that may not be
// written together: ipAllowList and its deprecated name ipWhiteList. Which
// kind m's block is, and whether it has one, is the middleware registry's
// to say (package middleware).
func (m *TCPMiddleware) Conflict() error {
	if m.IPAllowList != nil && m.IPWhiteList != nil {
		return FieldErrorf("ipWhiteList", "middleware has both ipAllowList and ipWhiteList (its deprecated name): one middleware block takes exactly one; keep ipAllowList")
	}
	return nil
}

// Deprecations returns a FieldError for each deprecated key m is written
// with: it applies, and the middleware shows status warning.
func (m *TCPMiddleware) Deprecations() []error {
	if m.IPWhiteList != nil && m.IPAllowList == nil {
		return []error{FieldErrorf("ipWhiteList", "ipWhiteList is deprecated (as in Traefik v3): it applies as ipAllowList; rename it ipAllowList")}
	}
	return nil
}

// TCPInFlightConn limits simultaneous connections per client IP.
type TCPInFlightConn struct {
	// Amount is the most connections one client IP may hold open. 0 rejects all.
	Amount int64 `json:"amount" toml:"amount" yaml:"amount" export:"true"`
	// DryRun counts would-be rejections without closing anything (tollgate extension).
	DryRun bool `json:"dryRun,omitempty" toml:"dryRun,omitempty" yaml:"dryRun,omitempty" export:"true"`
	// IPv6Subnet, when set, keys IPv6 clients by their prefix of that many bits
	// (tollgate extension). IPv4 clients are always keyed by address.
	IPv6Subnet *int `json:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" export:"true"`
	// Store names a store of the static configuration (stores.<name>) that
	// makes the amount one budget across every replica using the same store
	// and middleware name (tollgate extension). Empty: this process alone.
	Store string `json:"store,omitempty" toml:"store,omitempty" yaml:"store,omitempty" export:"true"`
	// FailureMode is what happens while the store cannot be reached: "closed"
	// (the default) rejects, "open" falls back to the amount per replica.
	FailureMode string `json:"failureMode,omitempty" toml:"failureMode,omitempty" yaml:"failureMode,omitempty" export:"true"`
}

// TCPIPAllowList admits only clients whose IP is in SourceRange (IPs or CIDRs).
type TCPIPAllowList struct {
	SourceRange []string `json:"sourceRange,omitempty" toml:"sourceRange,omitempty" yaml:"sourceRange,omitempty"`
}

// TCPRateLimit limits the rate of new connections per client IP: a token
// bucket of Burst connections per IP, refilled with Average connections per
// Period (Traefik's HTTP rateLimit, counted in connections). Its ranges are
// middleware/ratelimit's to judge.
type TCPRateLimit struct {
	// Average is the connections per Period one client IP may open in the
	// long run. 0 means no limit, as in Traefik.
	Average int64 `json:"average,omitempty" toml:"average,omitempty" yaml:"average,omitempty" export:"true"`
	// Period is the time Average is counted over; nil means 1 s.
	Period *Duration `json:"period,omitempty" toml:"period,omitempty" yaml:"period,omitempty" export:"true"`
	// Burst is the bucket's size: the connections one client IP may open at
	// once after a quiet spell; nil means 1, as in Traefik.
	Burst *int64 `json:"burst,omitempty" toml:"burst,omitempty" yaml:"burst,omitempty" export:"true"`
	// DryRun counts would-be rejections without closing anything (tollgate extension).
	DryRun bool `json:"dryRun,omitempty" toml:"dryRun,omitempty" yaml:"dryRun,omitempty" export:"true"`
	// IPv6Subnet, when set, keys IPv6 clients by their prefix of that many bits
	// (tollgate extension). IPv4 clients are always keyed by address.
	IPv6Subnet *int `json:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" export:"true"`
}

// Validate reports the problems of s that make it unusable on its own terms
// (references are checked by the compiler, which sees the whole configuration).
func (s *TCPService) Validate() error {
	switch {
	case s.LoadBalancer != nil && s.Weighted != nil:
		return errors.New("service has both loadBalancer and weighted: set exactly one")
	case s.LoadBalancer == nil && s.Weighted == nil:
		return errors.New("service has neither loadBalancer nor weighted")
	}
	if lb := s.LoadBalancer; lb != nil {
		if lb.ProxyProtocol != nil && lb.ProxyProtocol.Version != 1 && lb.ProxyProtocol.Version != 2 {
			return FieldErrorf("loadBalancer.proxyProtocol.version", "proxyProtocol.version %d is not supported: use 1 or 2", lb.ProxyProtocol.Version)
		}
		capped := false
		for i, srv := range lb.Servers {
			if srv.Address == "" {
				return FieldErrorf(fmt.Sprintf("loadBalancer.servers[%d]", i), "servers[%d] has no address", i)
			}
			if srv.MaxConn < 0 {
				return FieldErrorf(fmt.Sprintf("loadBalancer.servers[%d].maxConn", i), "servers[%d].maxConn %d is negative: use 0 (no cap) or more", i, srv.MaxConn)
			}
			capped = capped || srv.MaxConn > 0
		}
		if q := lb.Queue; q != nil {
			switch {
			case q.MaxSize != nil && *q.MaxSize < 0:
				return FieldErrorf("loadBalancer.queue.maxSize", "queue.maxSize %d is negative", *q.MaxSize)
			case q.Timeout < 0:
				return FieldErrorf("loadBalancer.queue.timeout", "queue.timeout %s is negative", q.Timeout)
			case !capped && len(lb.Servers) > 0:
				return FieldErrorf("loadBalancer.queue", "queue is set but no server has a maxConn: connections only wait for a server at its cap (set servers[].maxConn)")
			}
		}
	}
	if w := s.Weighted; w != nil {
		if len(w.Services) == 0 {
			return FieldErrorf("weighted.services", "weighted service lists no services")
		}
		for i, ws := range w.Services {
			if ws.Name == "" {
				return FieldErrorf(fmt.Sprintf("weighted.services[%d]", i), "weighted.services[%d] has no name", i)
			}
			if ws.Weight != nil && *ws.Weight < 0 {
				return FieldErrorf(fmt.Sprintf("weighted.services[%d].weight", i), "weighted.services[%d] (%s) has negative weight %d", i, ws.Name, *ws.Weight)
			}
		}
	}
	return nil
}
