package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oldReadme is where each section of the README of before the docs tree
// (1,791 lines, up to commit cd9abcd) went, with facts of it that a user or
// operator needs, each of which the page must still state. A fact that
// changes changes here too; a fact dropped from its page fails the test.
var oldReadme = []struct {
	section string // the old README's ## or ### heading
	page    string // where it is now, relative to the module root
	facts   []string
}{
	{"Two commands", "docs/getting-started/quickstart.md", []string{
		"go run . demo --configFile=testdata/quickstart.yml",
		"at most **2 connections per client IP**",
		"curl: (52) Empty reply from server",
		"applies within milliseconds and open connections are untouched",
	}},
	{"Two commands", "docs/development.md", []string{
		"`TOLLGATE_REQUIRE_INTEGRATION=1` turns the skips into failures",
		"the last MPL-2.0 release",
		"`KUBEBUILDER_ASSETS=<folder>` uses other builds",
		"about 8 GB of caches, once",
	}},
	{"Two commands", "README.md", []string{
		"go run . demo --configFile=testdata/quickstart.yml",
		"go test -race ./...",
	}},
	{"The full demo: Docker labels and Consul tags", "docs/getting-started/demo.md", []string{
		"examples/demo.sh up",
		"examples/demo.sh down",
		"`image: hashicorp/consul:1.14.11` can replace the locally built Consul image",
		"whose first build takes 7–8 minutes",
	}},
	{"The documented examples, as they work here", "docs/reference/middlewares/inflightconn.md", []string{
		"[tcp.middlewares.test-inflightconn.inFlightConn]",
		`"traefik.tcp.middlewares.test-inflightconn.inflightconn.amount=10"`,
		"15 connections held from 127.0.0.2 get exactly 10 through",
	}},
	{"The usual chain: ipAllowList, rateLimit, inFlightConn", "docs/reference/middlewares/index.md", []string{
		"middlewares: [office-only, db-rate, db-limit]",
		"a connection the rate refuses never counts against the concurrency limit",
		"a connection refused for concurrency would spend nothing",
	}},
	{"Static configuration", "docs/reference/static-configuration.md", []string{
		"a config file wins over flags, flags over environment variables",
		"`$HOME/.config/` and the working directory",
		"Kubernetes' service variables",
		"unknown option \"adress\" (see tollgate --help)",
		"cannot listen on 127.0.0.1:5432",
		"| `--entryPoints.<name>.transport.maxUnroutedPerIP` |",
		// Issue 42: a service without a transport dials with Traefik's
		// defaults (the old README's 10 s and no keepalive are gone).
		"none: such services dial with Traefik's `default@internal` values, a 30s timeout and keepalive probes every 15s",
		"301 for a GET and 308 for another method",
		"`GOMAXPROCS=2` in the environment means two loops",
		"keeps its loops",
	}},
	// The old README's table of Traefik's options is now the generated
	// table of every option (issue 42).
	{"Static configuration", "docs/reference/traefik-options.md", []string{
		"| `global.checkNewVersion` | ignored |",
		"| `metrics.prometheus.buckets` | ignored |",
		"| `providers.kubernetesIngress` | ignored |",
		"| `providers.kubernetesGateway` | refused |",
		"| `hostResolver` | ignored |",
	}},
	{"Static configuration", "docs/traefik.md", []string{
		"a UDP entry point: tollgate does not listen on it",
	}},
	{"Dynamic configuration and semantics", "docs/reference/routers.md", []string{
		"ties broken by qualified name",
		"A router without a rule is dropped",
		"`{name:regexp}` pattern in `HostSNIRegexp` is read as a Go regexp",
		"reloads never cut live connections",
	}},
	{"Dynamic configuration and semantics", "docs/reference/services.md", []string{
		"A dial failure tries the next healthy server once before closing the client",
		"`terminationDelay: 0` gives it no time",
		"an explicit 0, in a servers transport or in the deprecated",
	}},
	{"Dynamic configuration and semantics", "docs/reference/providers/file.md", []string{
		"`tollgate routes TCP only: the http section is ignored`",
		"once the folder is quiet for 15 ms",
		"A file still open for writing after 10 s is named in a warning",
		"Skipping empty Configuration",
	}},
	{"Dynamic configuration and semantics", "docs/reference/middlewares/ipallowlist.md", []string{
		"`127.0.0.9/8` has host bits set",
		"`::ffff:0:0/96` is every IPv4 address",
	}},
	{"Templates in dynamic files", "docs/reference/providers/file.md", []string{
		"`split \"a,b\" \",\"`",
		"the rendered text to 16 MiB",
		"`indent` to 1,024 spaces",
		"not when the environment does",
	}},
	{"When tollgate reads before routing", "docs/reference/routers.md", []string{
		"server-first protocols (SMTP, MySQL, FTP: the server speaks first)",
		"`serverFirstTimeout` (1 s)",
		"Redis's `PING` is passed on at once",
		"`tollgate_entrypoint_rejected_total{reason=\"unrouted_limit\"}`",
		"list a load balancer in `trustedIPs` rather than trusting everyone",
	}},
	{"TLS termination", "docs/reference/tls.md", []string{
		"decide **before any handshake work**",
		"`CN=TOLLGATE DEFAULT CERT`",
		"`caFiles` alone means `RequireAndVerifyClientCert`",
		"its SNI never falls through to a catch-all",
		"a terminated connection stays in the old process",
		"`backend did not agree to PostgreSQL TLS`",
		"`sslnegotiation=direct`",
	}},
	{"ACME", "docs/reference/acme.md", []string{
		"offering only the protocol `acme-tls/1`",
		"`http://<name>/.well-known/acme-challenge/<token>`",
		"tried again after 10 minutes",
		"`acme.json.lock`",
		"`golang.org/x/crypto/x509roots/fallback`",
		"`TestACMERenewsAStoredCertificate`",
	}},
	{"inFlightConn: what differs from Traefik", "docs/reference/middlewares/inflightconn.md", []string{
		"100,000 distinct source IPs leave zero entries",
		"existing connections are never cut",
		"10 lines per second per middleware",
		"so a client that closes can connect again at once",
	}},
	{"rateLimit: a connection rate per client IP", "docs/reference/middlewares/ratelimit.md", []string{
		"traefik/traefik#5999",
		"40 simultaneous connections from one IP with `burst: 5` get exactly 5",
		"about 23 bytes per tracked IPv4 address and 35 per IPv6 one",
		"`connection rate limit reached for <ip> (average 100 per 1m0s, burst 20)`",
	}},
	{"How a refusal looks", "docs/reference/middlewares/index.md", []string{
		"the first refusal of a client IP in a second",
		"`curl: (56) Recv failure: Connection reset by peer`",
		"`curl: (7) Failed to connect ... Couldn't connect to server`",
	}},
	{"Server connection caps and the queue", "docs/reference/services.md", []string{
		"maxConn: 90",
		"traefik.tcp.services.pg.loadbalancer.queue.timeout=10s",
		"counts against its client's `inFlightConn` amount",
		"`tollgate_service_queue_rejected_total{reason=\"full\"|\"timeout\"|\"evicted\"}`",
		"A `queue` without any server `maxConn` is an error",
	}},
	{"TLS", "docs/reference/tls.md", []string{
		"16 ms for a rename, 87 ms for a rewrite in place",
		"a FIFO, a device or a file over 4 MiB is refused",
		"`.tls.certresolver`",
		"Declare them in a file, a KV store or a Kubernetes resource",
		"`traefik/tls/stores/default/defaultCertificate/certFile`",
		"which has `configmaps` as Traefik's has",
		"(`mtls` from a container is `mtls@docker`)",
	}},
	{"TLS", "bench/results/2026-12-03-0836-amd-epyc.md", []string{
		"**Cost, measured** (bench/run.sh `tls-handshake`, 2026-12-03 08:36 UTC",
		"X25519 alone is 14% of tollgate's CPU here",
	}},
	{"Running several replicas", "docs/operations/replicas.md", []string{
		"HAProxy `balance source`",
		"`tollgate:{<middleware>}:ip:<key>`",
		"at most 4,096 per store",
		"an attacker who can make Redis slow must not gain ten times the connections",
		"`TestStoreHungNeverBlocksLoops`",
		"| one client at a time: µs per connection | 597 | 1,168 |",
		"`rejectedUnreachableTotal`",
	}},
	{"Docker Swarm", "docs/reference/providers/swarm.md", []string{
		"docker stack deploy --resolve-image never -c examples/swarm/stack.yml tg",
		"| `.refreshSeconds` |",
		"`shop_db` becomes `shop-db`",
		"(100 ms doubling to 500 ms)",
		"| Swarm: `service create` returned -> router in | 872 ms | 1545 ms |",
		"This machine's kernel has no IPVS",
	}},
	{"KV stores", "docs/reference/providers/kv.md", []string{
		"zkCli.sh create /traefik/tcp/routers/my-router/rule 'HostSNI(`*`)'",
		"`@consul-<namespace>`",
		"router \"bad\" is dropped",
		"(`KA`, or at least `K$g`",
		"ZooKeeper 17 ms / 29–36 ms",
		"`NOAUTH Authentication required.`",
	}},
	{"Admin API and metrics", "docs/reference/api.md", []string{
		"--metrics.prometheus.entrypoint=metrics --api.dashboard=true",
		"it serves at most 64 connections at once",
		"`X-Next-Page`",
		"`rejectedTotal`, `topClients`",
		"(also Traefik's spelling `serverstransports`)",
	}},
	{"Metrics", "docs/reference/metrics.md", []string{
		"about 60 ns, no allocation",
		"buckets 0.005, 0.05, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400 s",
		"`go_*`, `process_*`",
	}},
	{"Access log", "docs/operations/logs.md", []string{
		"Traefik writes no access log for TCP",
		"`ClientHost` is `client_ip`",
		"another mode stops the start naming it",
	}},
	{"Logs", "docs/operations/logs.md", []string{
		"the accept loop then pauses from 5 ms up to 1 s",
		"the next line written carries `suppressed`",
	}},
	{"tollgate check", "docs/reference/commands.md", []string{
		"tollgate check --kvProvider=etcd traefik.kv",
		"`--kvProvider=NAME`",
		"Exit status 1 when a problem would keep a router from serving; warnings alone exit 0",
		"`<service>-<project>`",
	}},
	{"tollgate healthcheck", "docs/reference/commands.md", []string{
		// The image's built-in HEALTHCHECK (and --no-healthcheck to turn it
		// off) went with issue 42: the image has none, as Traefik's.
		"**no built-in `HEALTHCHECK`**",
		"`/usr/local/bin/traefik`, a link to `/tollgate`",
	}},
	{"Upgrading in place", "docs/operations/upgrading.md", []string{
		"SIGUSR2 is nginx's binary-upgrade signal",
		"a second while one runs gets 409",
		"`:5432` (every address, IPv4 and IPv6) and `0.0.0.0:5432` (IPv4 only) are two",
		"14–15 ms from SIGKILL to the freed slots admitting again",
		"`TestUpgradeTenInARow`",
		"There is never a moment with nothing listening",
		"`NotifyAccess=main`",
		"`KillMode=control-group` (the default) is what works",
		"never write into the running file",
	}},
	{"Layout", "ARCHITECTURE.md", []string{
		"| `internal/cmdline` |",
		"| `provider/kv` |",
		"| `check` |",
	}},
	{"Development", "docs/development.md", []string{
		"`FuzzReadTLSFiles`",
		"-fuzzminimizetime 0",
		"go test -bench . ./middleware/inflightconn/ ./middleware/ratelimit/ ./proxy/",
		"AB=1 TOLLGATE_BASE_REF=main bench/run.sh",
	}},
	{"Development", "bench/results/2026-12-06-0237-amd-epyc.md", []string{
		"| flood: attacker attempts absorbed/s |",
		"Batching the loops' calls through io_uring",
	}},
}

// Every fact of the old README that a user or operator needs is on the page
// it moved to.
func TestOldReadmeFacts(t *testing.T) {
	dir := root(t)
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, s := range oldReadme {
		b, err := os.ReadFile(filepath.Join(dir, s.page))
		if err != nil {
			t.Errorf("%q went to %s: %v", s.section, s.page, err)
			continue
		}
		text := norm(string(b))
		for _, f := range s.facts {
			if !strings.Contains(text, norm(f)) {
				t.Errorf("the old README's %q said %q; %s no longer does", s.section, f, s.page)
			}
		}
	}
}
