package consul

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// fakeKV answers List from a script and records the queries.
type fakeKV struct {
	answers []answer
	queries []api.QueryOptions
}

type answer struct {
	index uint64
	pairs api.KVPairs
	err   error
}

func (f *fakeKV) List(prefix string, q *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error) {
	f.queries = append(f.queries, *q)
	if len(f.answers) == 0 {
		return nil, nil, errors.New("script exhausted")
	}
	a := f.answers[0]
	f.answers = f.answers[1:]
	if a.err != nil {
		return nil, nil, a.err
	}
	return a.pairs, &api.QueryMeta{LastIndex: a.index}, nil
}

func pairs(kvs ...string) api.KVPairs {
	var out api.KVPairs
	for i := 0; i+1 < len(kvs); i += 2 {
		out = append(out, &api.KVPair{Key: kvs[i], Value: []byte(kvs[i+1])})
	}
	return out
}

// The blocking-query loop: index 0 first and after an error; a wait that
// runs out (same index) is not a change; an index that goes backwards reads
// again at once; on an error the next endpoint is asked.
func TestStoreBlockingQueries(t *testing.T) {
	a, b := &fakeKV{}, &fakeKV{}
	a.answers = []answer{
		{index: 5, pairs: pairs("traefik/x", "1")},
		{index: 5}, // the wait ran out
		{index: 7, pairs: pairs("traefik/x", "2")}, // a change
		{index: 3, pairs: pairs("traefik/x", "3")}, // backwards: restarted agent
		{index: 3, pairs: pairs("traefik/x", "3")}, // the re-read, at once
		{err: errors.New("connection refused")},    // down: next endpoint
	}
	b.answers = []answer{{index: 9, pairs: pairs("traefik/x", "4")}}
	s := newStore([]kvAPI{a, b}, kv.Options{}, "team-a")
	s.wait = 0
	ctx := context.Background()
	want := func(v string) {
		t.Helper()
		got, err := s.Next(ctx)
		if err != nil || len(got) != 1 || got[0].Value != v {
			t.Fatalf("Next: %v %v, want traefik/x=%s", got, err, v)
		}
	}
	want("1")
	want("2")
	want("3")
	if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("want the error, got %v", err)
	}
	want("4")
	idx := func(qs []api.QueryOptions) []uint64 {
		var out []uint64
		for _, q := range qs {
			out = append(out, q.WaitIndex)
			if q.Namespace != "team-a" {
				t.Errorf("query without the namespace: %+v", q)
			}
		}
		return out
	}
	if got := idx(a.queries); len(got) != 6 || got[0] != 0 || got[1] != 5 || got[2] != 5 || got[3] != 7 || got[4] != 0 || got[5] != 3 {
		t.Errorf("wait indexes %v, want [0 5 5 7 0 3]", got)
	}
	if got := idx(b.queries); len(got) != 1 || got[0] != 0 {
		t.Errorf("the next endpoint after the error: wait indexes %v, want [0]", got)
	}
}

func TestNew(t *testing.T) {
	cfg := &config.ConsulKVProvider{}
	cfg.SetDefaults()
	ps, err := New(cfg, provider.Options{})
	if err != nil || len(ps) != 1 || ps[0].Name() != "consul" {
		t.Fatalf("defaults: %v %v", ps, err)
	}
	cfg.Namespaces = []string{"a", "b"}
	ps, err = New(cfg, provider.Options{})
	if err != nil || len(ps) != 2 || ps[0].Name() != "consul-a" || ps[1].Name() != "consul-b" {
		t.Fatalf("namespaces: %v %v", ps, err)
	}
	for _, tc := range []struct {
		edit func(*config.ConsulKVProvider)
		want string
	}{
		{func(c *config.ConsulKVProvider) { c.Endpoints = nil }, "providers.consul.endpoints: no endpoint"},
		{func(c *config.ConsulKVProvider) { c.Endpoints = []string{"ftp://x:1"} }, `providers.consul.endpoints: "ftp://x:1": scheme "ftp"`},
		{func(c *config.ConsulKVProvider) { c.Endpoints = []string{"nohost"} }, `"nohost": not [scheme://]host:port`},
		{func(c *config.ConsulKVProvider) { c.TLS = &config.KVClientTLS{CA: "/nonexistent.pem"} }, `providers.consul.tls.ca="/nonexistent.pem"`},
		{func(c *config.ConsulKVProvider) { c.TLS = &config.KVClientTLS{Cert: "c.pem"} }, "providers.consul.tls: set both cert and key"},
		{func(c *config.ConsulKVProvider) { c.Namespaces = []string{""} }, "an empty namespace"},
	} {
		c := &config.ConsulKVProvider{}
		c.SetDefaults()
		tc.edit(c)
		if _, err := New(c, provider.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}

// HTTPS with the CA, and an ACL token: the route applies; without the CA
// the certificate is an error in /api/providers.
func TestTLSAndToken(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin, err := itest.ConsulBinary()
	itest.Need(t, "consul agent", err)
	dir := t.TempDir()
	cert, key := kvtest.Cert(t, dir)
	https := kvtest.FreePort(t)
	hcl := fmt.Sprintf(`ports { https = %d, http = -1 }
tls { defaults { cert_file = %q, key_file = %q } }
acl { enabled = true, default_policy = "deny", tokens { initial_management = "root-token" } }`, https, cert, key)
	proc, err := kvtest.StartProc(bin, "agent", "-dev", "-node", "tls", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-serf-lan-port", strconv.Itoa(kvtest.FreePort(t)), "-server-port", strconv.Itoa(kvtest.FreePort(t)),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1", "-serf-wan-port", "-1", "-hcl", hcl, "-log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	c, err := api.NewClient(&api.Config{Address: "127.0.0.1:" + strconv.Itoa(https), Scheme: "https", Token: "root-token",
		TLSConfig: api.TLSConfig{CAFile: cert}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k, v string) {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := kvtest.Ready(proc, 30*time.Second, func() error { _, err := c.KV().Put(&api.KVPair{Key: "ready"}, nil); return err }); err != nil {
		t.Fatal(err)
	}
	ep := "--providers.consul.endpoints=127.0.0.1:" + strconv.Itoa(https)
	kvtest.Routed(t, Name, []string{ep, "--providers.consul.tls.ca=" + cert, "--providers.consul.token=root-token"}, put)
	// Without a token that may read the keys, Consul 1.14 answers as if
	// there were none (404, and no X-Consul-Results-Filtered-By-ACLs): the
	// provider serves nothing (docs/reference/providers/kv.md).
	tg := itest.StartTollgate(t, "--entryPoints.db.address="+itest.FreeAddr(t), ep, "--providers.consul.tls.ca="+cert)
	itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).Provider(Name).State == "ok" }, "provider ok")
	if rd := tg.Rawdata(t); len(rd.Routers) != 0 {
		t.Errorf("routers without a token: %v", rd.Routers)
	}
	kvtest.Failing(t, Name, []string{"--providers.consul.endpoints=https://127.0.0.1:" + strconv.Itoa(https), "--providers.consul.token=root-token"},
		"certificate signed by unknown authority")
}
