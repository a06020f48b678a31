package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// parallel runs fn(i) for i in [0,n) on `workers` goroutines.
func parallel(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// prober opens one connection through the proxy and pings through it.
type prober func(d *net.Dialer, timeout time.Duration) (net.Conn, Outcome, error)

// plainProber is probe on target.
func plainProber(target string) prober {
	return func(d *net.Dialer, timeout time.Duration) (net.Conn, Outcome, error) {
		c, o, err := probe(d, target, timeout)
		if c == nil {
			return nil, o, err
		}
		return c, o, err
	}
}

// warmup opens and closes a few connections so that the proxy's one-time
// allocations (pools, first goroutine stacks, lazily built tables) are not
// charged to the measured connections.
func warmup(c *common, base string, n int) error {
	return warmupWith(c, plainProber(c.target), base, n)
}

func warmupWith(c *common, open prober, base string, n int) error {
	ips, err := ipRange(base, n)
	if err != nil {
		return err
	}
	ds := dialers(ips, c.dialTimeout)
	parallel(n, 8, func(i int) {
		if cn, o, _ := open(ds[i], 2*time.Second); o == Admitted {
			cn.Close()
		}
	})
	return nil
}

func memMetrics(m map[string]any, key string, v Mem) {
	m[key+"_rss_kib"] = v.RSS
	m[key+"_pss_kib"] = v.PSS
	m[key+"_fds"] = v.FDs
}

func idleMemoryCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	return idleMemory(fs, c, "127.5.0.1", nil)
}

// tls-idle-memory: idle-memory through a TLS-terminating peer, each
// connection a full handshake (as tls-handshake's) and a ping through it.
func tlsIdleMemoryCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	sni := fs.String("sni", "bench.example", "server name sent (the peers' certificate names it)")
	return idleMemory(fs, c, "127.8.0.1", func() *tls.Config {
		return &tls.Config{ServerName: *sni, InsecureSkipVerify: true,
			MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}
	})
}

// idleMemory registers the flags of an idle-memory scenario; with
// tlsConf, every connection is a TLS connection.
func idleMemory(fs *flag.FlagSet, c *common, defaultBase string, tlsConf func() *tls.Config) func() (*Result, error) {
	conns := fs.Int("conns", 4000, "idle proxied connections to open and hold")
	ipBase := fs.String("ip-base", defaultBase, "first source address")
	nips := fs.Int("ips", 500, "source addresses the connections are spread over (conns/ips <= limit)")
	openers := fs.Int("openers", 32, "concurrent openers")
	settle := fs.Duration("settle", 2*time.Second, "wait before each memory reading")
	pingTimeout := fs.Duration("ping-timeout", 2*time.Second, "admission probe timeout")
	return func() (*Result, error) {
		if c.pid <= 0 {
			return nil, fmt.Errorf("-pid is required (there is no proxy to measure)")
		}
		if per := (*conns + *nips - 1) / *nips; c.limit > 0 && per > c.limit {
			return nil, fmt.Errorf("-conns/-ips = %d exceeds the limit %d", per, c.limit)
		}
		ips, err := ipRange(*ipBase, *nips)
		if err != nil {
			return nil, err
		}
		open := plainProber(c.target)
		warmBase := "127.5.250.1"
		if tlsConf != nil {
			conf := tlsConf()
			open = func(d *net.Dialer, timeout time.Duration) (net.Conn, Outcome, error) {
				return probeTLS(d, c.target, timeout, conf)
			}
			warmBase = "127.8.250.1"
		}
		if err := warmupWith(c, open, warmBase, 64); err != nil {
			return nil, err
		}
		time.Sleep(*settle)
		m := map[string]any{}
		before := readMem(c.pid)
		memMetrics(m, "before", before)

		ds := dialers(ips, c.dialTimeout)
		held := make([]net.Conn, *conns)
		defer closeAll(held)
		outcomes := make([]Outcome, *conns)
		errs := make([]string, *conns)
		t0 := time.Now()
		parallel(*conns, *openers, func(i int) {
			var err error
			held[i], outcomes[i], err = open(ds[i%len(ds)], *pingTimeout)
			errs[i] = errClass(outcomes[i].String(), err)
		})
		m["open_s"] = round(time.Since(t0).Seconds(), 2)
		counts, kinds := map[Outcome]int{}, counters{}
		for i, o := range outcomes {
			counts[o]++
			if errs[i] != "" {
				kinds[errs[i]]++
			}
		}
		for o := Admitted; o <= DialFailed; o++ {
			m[o.String()] = counts[o]
		}
		kinds.put(m, "error_kinds")
		time.Sleep(*settle)
		during := readMem(c.pid)
		memMetrics(m, "held", during)
		adm := counts[Admitted]
		if adm > 0 {
			m["kib_per_conn"] = round(float64(during.RSS-before.RSS)/float64(adm), 2)
			m["pss_kib_per_conn"] = round(float64(during.PSS-before.PSS)/float64(adm), 2)
			m["fds_per_conn"] = round(float64(during.FDs-before.FDs)/float64(adm), 2)
		}
		m["all_admitted"] = adm == *conns

		closeAll(held)
		time.Sleep(*settle)
		after := readMem(c.pid)
		memMetrics(m, "closed", after)
		m["procs"] = during.Procs
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%d/%d admitted", adm, *conns),
			fmt.Sprintf("RSS %d -> %d KiB (%v KiB/conn, PSS %v KiB/conn, %v fds/conn)",
				before.RSS, during.RSS, m["kib_per_conn"], m["pss_kib_per_conn"], m["fds_per_conn"]),
			fmt.Sprintf("after close %d KiB", after.RSS),
		)}, nil
	}
}

// ipSprayCmd: one short connection from each of many distinct addresses,
// in rounds of fresh addresses with a pause between them. When per-IP state
// is freed (and its memory reused), rounds after the first cost about
// nothing; when it is never freed, each round grows RSS by about as much as
// the one before. The pause must outlast the peer's own expiry of idle
// per-IP state (HAProxy's stick-table `expire`).
func ipSprayCmd(fs *flag.FlagSet, c *common) func() (*Result, error) {
	perRound := fs.Int("ips-per-round", 50_000, "fresh source addresses per round, one short connection each")
	rounds := fs.Int("rounds", 3, "rounds")
	ipBase := fs.String("ip-base", "127.100.0.1", "first address of the spray")
	workers := fs.Int("workers", 32, "concurrent sprayers")
	settle := fs.Duration("settle", 2*time.Second, "wait after a round before reading memory")
	pause := fs.Duration("pause", 12*time.Second, "idle time between rounds (longer than the peer's per-IP state expiry)")
	pingTimeout := fs.Duration("ping-timeout", 2*time.Second, "probe timeout")
	return func() (*Result, error) {
		if c.pid <= 0 {
			return nil, fmt.Errorf("-pid is required (there is no proxy to measure)")
		}
		if *rounds < 2 {
			return nil, fmt.Errorf("-rounds must be at least 2 (growth is measured after round 1)")
		}
		ips, err := ipRange(*ipBase, *perRound**rounds)
		if err != nil {
			return nil, err
		}
		if err := warmup(c, "127.99.0.1", 64); err != nil {
			return nil, err
		}
		time.Sleep(*settle)
		m := map[string]any{}
		first := readMem(c.pid)
		memMetrics(m, "before", first)
		var r1, last Mem
		var fails int64
		kinds := counters{}
		var kmu sync.Mutex
		for r := 1; r <= *rounds; r++ {
			k := fmt.Sprintf("r%d_", r)
			if r > 1 {
				time.Sleep(*pause)
			}
			var bad atomic.Int64
			t0 := time.Now()
			off := (r - 1) * *perRound
			parallel(*perRound, *workers, func(i int) {
				cn, o, err := probe(newDialer(ips[off+i], c.dialTimeout), c.target, *pingTimeout)
				if o == Admitted {
					cn.Close()
					return
				}
				bad.Add(1)
				kmu.Lock()
				kinds[errClass(o.String(), err)]++
				kmu.Unlock()
			})
			el := time.Since(t0)
			time.Sleep(*settle)
			cur := readMem(c.pid)
			m[k+"conns_per_s"] = round(float64(*perRound)/el.Seconds(), 1)
			m[k+"failed"] = bad.Load()
			m[k+"rss_kib"] = cur.RSS
			fails += bad.Load()
			if r == 1 {
				r1 = cur
			}
			last = cur
		}
		memMetrics(m, "final", last)
		kinds.put(m, "error_kinds")
		later := int64(*perRound * (*rounds - 1))
		m["ips_total"] = len(ips)
		m["failed"] = fails
		m["r1_growth_kib"] = r1.RSS - first.RSS
		m["later_growth_kib"] = last.RSS - r1.RSS
		m["bytes_per_new_ip_after_r1"] = round(float64(last.RSS-r1.RSS)*1024/float64(later), 1)
		m["total_growth_kib"] = last.RSS - first.RSS
		return &Result{Metrics: m, human: humanf(
			fmt.Sprintf("%d addresses in %d rounds, %d failed", len(ips), *rounds, fails),
			fmt.Sprintf("RSS %d -> %d (round 1) -> %d KiB", first.RSS, r1.RSS, last.RSS),
			fmt.Sprintf("%v B per new address after round 1", m["bytes_per_new_ip_after_r1"]),
		)}, nil
	}
}
