package preflight

import (
	"strings"
	"testing"

	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
)

func static(t *testing.T, args ...string) *config.Static {
	t.Helper()
	c := config.NewCommand()
	if err := flag.Decode(args, c); err != nil {
		t.Fatal(err)
	}
	return &c.Static
}

// What a start logs and check --static prints, in one order: the file's
// unknown keys, Traefik's options, what means something else here, the
// variables that configure nothing, then the resolvers; each with the
// field it is about. A resolver without a challenge is warned about and
// gets no ACME client; one with a challenge does.
func TestCheckNotices(t *testing.T) {
	st := static(t, "--entryPoints.db.address=:5432", "--entryPoints.dns.address=:53/udp", "--api.insecure",
		"--certificatesResolvers.none.acme.email=a@example.com",
		"--certificatesResolvers.le.acme.email=a@example.com", "--certificatesResolvers.le.acme.tlsChallenge")
	start := cmdline.Start{
		UnknownKeys: []cmdline.UnknownKey{{File: "tollgate.yml", Key: "entryPointz", Line: 3}},
		Ignored:     []cmdline.IgnoredVariable{{Name: "TOLLGATE_ENTRYPOINT_DB_ADDRESS", Why: "configures nothing"}},
	}
	rep, err := Check(st, start)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, n := range rep.Notices {
		lines = append(lines, n.Field+"="+n.Value+" "+n.String())
	}
	all := strings.Join(lines, "\n")
	order := []string{"key=entryPointz tollgate.yml:3: entryPointz", "= api.insecure:", "entrypoint=dns entryPoints.dns:",
		"variable=TOLLGATE_ENTRYPOINT_DB_ADDRESS TOLLGATE_ENTRYPOINT_DB_ADDRESS: configures nothing", "resolver=none certificatesResolvers.none.acme: no challenge"}
	at := 0
	for _, want := range order {
		i := strings.Index(all[at:], want)
		if i < 0 {
			t.Fatalf("notices lack %q after position %d (in this order):\n%s", want, at, all)
		}
		at += i
	}
	if rep.Warnings() != len(rep.Notices) {
		t.Errorf("%d warnings of %d notices, want every one a warning:\n%s", rep.Warnings(), len(rep.Notices), all)
	}
	if strings.Join(rep.ACME, ",") != "le" {
		t.Errorf("ACME %v, want [le] (none has no challenge)", rep.ACME)
	}
}

// A start and check --static refuse the same: Validate's errors, which
// name the variables that configure nothing (a misspelled one may be why),
// and the resolvers' (internal/acme's CheckResolvers too).
func TestCheckErrors(t *testing.T) {
	st := static(t, "--entryPoints.db.address=:5432", "--entryPoints.db.transport.lifeCycle.graceTimeOut=-1s")
	start := cmdline.Start{Ignored: []cmdline.IgnoredVariable{{Name: "TOLLGATE_X", Why: "configures nothing"}}}
	if _, err := Check(st, start); err == nil || !strings.Contains(err.Error(), "TOLLGATE_X configures nothing") {
		t.Errorf("Validate's error: %v, want it to name TOLLGATE_X", err)
	}
	st = static(t, "--entryPoints.db.address=:5432",
		"--certificatesResolvers.a.acme.dnsChallenge.provider=manual", "--certificatesResolvers.a.acme.dnsChallenge.resolvers=1.1.1.1:53",
		"--certificatesResolvers.b.acme.dnsChallenge.provider=manual", "--certificatesResolvers.b.acme.dnsChallenge.resolvers=8.8.8.8:53")
	if _, err := Check(st, cmdline.Start{}); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("two lists of DNS resolvers: %v, want CheckResolvers' error", err)
	}
}
