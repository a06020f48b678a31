package etcd

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/kv"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// countingClient counts the range requests.
type countingClient struct {
	client
	gets atomic.Int64
}

func (c *countingClient) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.gets.Add(1)
	return c.client.Get(ctx, key, opts...)
}

func value(pairs []kv.Pair, key string) string {
	for _, p := range pairs {
		if p.Key == key {
			return p.Value
		}
	}
	return ""
}

// The watch resumes from the last revision after an outage: a change made
// while etcd was down arrives as a watch event, without reading the prefix
// again; a compacted revision is read again from scratch.
func TestStoreResumesFromTheLastRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: skipped with -short")
	}
	srv := startServer(t)
	cc := &countingClient{}
	st := newStore(func() (client, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.url(srv.client)}, Logger: zap.NewNop(),
			DialOptions: dialOptions()})
		if err != nil {
			return nil, err
		}
		cc.client = etcdClient{c}
		return cc, nil
	}, kv.Options{})
	defer st.Close()
	ctx := context.Background()
	nextWithin := func(d time.Duration) ([]kv.Pair, error) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return st.Next(c)
	}

	srv.Put(t, "traefik/a", "1")
	pairs, err := nextWithin(5 * time.Second)
	if err != nil || value(pairs, "traefik/a") != "1" {
		t.Fatalf("first read: %v %v", pairs, err)
	}
	srv.Put(t, "traefik/a", "2")
	srv.Put(t, "other/b", "x") // outside the prefix
	pairs, err = nextWithin(5 * time.Second)
	if err != nil || value(pairs, "traefik/a") != "2" || len(pairs) != 1 {
		t.Fatalf("after a put: %v %v", pairs, err)
	}
	if n := cc.gets.Load(); n != 1 {
		t.Fatalf("%d range requests, want 1 (changes come from the watch)", n)
	}
	rev := st.rev

	srv.Kill(t)
	if _, err = nextWithin(5 * time.Second); err == nil || !strings.Contains(err.Error(), "TRANSIENT_FAILURE") {
		t.Fatalf("etcd killed: %v, want the connection's failure", err)
	}
	srv.WhileDown(t, func(put func(k, v string)) { put("traefik/a", "3") })
	srv.Restart(t)
	// Next's first call after the error probes etcd and resumes the watch
	// (returning the pairs it has); the change arrives as a replayed event.
	var got []kv.Pair
	for range 3 {
		if got, err = nextWithin(10 * time.Second); err == nil && value(got, "traefik/a") == "3" {
			break
		}
	}
	if value(got, "traefik/a") != "3" {
		t.Fatalf("the change made while down: %v %v", got, err)
	}
	if n := cc.gets.Load(); n != 2 {
		t.Errorf("%d range requests, want 2: the first read and one count-only probe (a resumed watch, not a new read)", n)
	}
	if st.rev <= rev {
		t.Errorf("revision %d, want above %d", st.rev, rev)
	}

	// Compacted while down: the watch cannot resume; the prefix is read again.
	srv.Kill(t)
	if _, err = nextWithin(5 * time.Second); err == nil {
		t.Fatal("no error with etcd killed")
	}
	srv.WhileDown(t, func(put func(k, v string)) {
		put("traefik/a", "4")
		c := srv.dialDown(t)
		defer c.Close()
		resp, err := c.Get(ctx, "traefik/a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	})
	srv.Restart(t)
	for range 3 {
		if got, err = nextWithin(10 * time.Second); err == nil && value(got, "traefik/a") == "4" {
			break
		}
	}
	if value(got, "traefik/a") != "4" {
		t.Fatalf("after a compaction: %v %v", got, err)
	}
	if n := cc.gets.Load(); n != 4 {
		t.Errorf("%d range requests, want 4 (a probe, then a new read after the compaction)", n)
	}
}

// TLS with the CA, and etcd authentication: the route applies; a wrong
// password is an error in /api/providers.
func TestTLSAndAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin, err := kvtest.EtcdBinary()
	itest.Need(t, "etcd", err)
	dir := t.TempDir()
	cert, key := kvtest.Cert(t, dir)
	client, peer := kvtest.FreePort(t), kvtest.FreePort(t)
	url := "https://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	proc, err := kvtest.StartProc(bin, "--name=tls", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=tls="+peerURL,
		"--cert-file="+cert, "--key-file="+key, "--log-level=error")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	tc, err := provider.TLSConfig(&config.KVClientTLS{CA: cert}, "test")
	if err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	if err := kvtest.Ready(proc, 30*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := root.Get(c, "x")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	authed, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tc, Username: "root", Password: "s3cret", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	ep := "--providers.etcd.endpoints=127.0.0.1:" + strconv.Itoa(client)
	kvtest.Routed(t, Name, []string{ep, "--providers.etcd.tls.ca=" + cert, "--providers.etcd.username=root", "--providers.etcd.password=s3cret"},
		func(k, v string) { put(t, authed, k, v) })
	kvtest.Failing(t, Name, []string{ep, "--providers.etcd.tls.ca=" + cert, "--providers.etcd.username=root", "--providers.etcd.password=wrong"},
		"authentication failed")
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		edit func(*config.EtcdProvider)
		want string
	}{
		{func(c *config.EtcdProvider) { c.Endpoints = nil }, "providers.etcd.endpoints: no endpoint"},
		{func(c *config.EtcdProvider) { c.Endpoints = []string{" "} }, "an empty endpoint"},
		{func(c *config.EtcdProvider) { c.Username = "u" }, "set both username and password"},
		{func(c *config.EtcdProvider) { c.TLS = &config.KVClientTLS{CA: "/nonexistent"} }, `providers.etcd.tls.ca="/nonexistent"`},
	} {
		c := &config.EtcdProvider{}
		c.SetDefaults()
		tc.edit(c)
		if _, err := New(c, provider.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
	c := &config.EtcdProvider{}
	c.SetDefaults()
	if p, err := New(c, provider.Options{}); err != nil || p.Name() != "etcd" {
		t.Errorf("defaults: %v %v", p, err)
	}
}
