package check

import (
	"strings"
	"testing"

	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
)

// `tollgate check --static` prints what a start logs (internal/preflight),
// one line each with its level, a variable named before what is said of
// it, then the count of warnings; what a start refuses is its error.
func TestStatic(t *testing.T) {
	c := config.NewCommand()
	if err := flag.Decode([]string{"--entryPoints.db.address=:5432", "--accessLog.format=common", "--entryPoints.traefik.address=:9100", "--ping"}, c); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	start := cmdline.Start{Ignored: []cmdline.IgnoredVariable{{Name: "TOLLGATE_X", Why: "configures nothing"}}}
	if err := Static(&c.Static, start, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"warning: accessLog.format: ", "info: entryPoints.traefik: internal", "warning: TOLLGATE_X: configures nothing\n",
		"ok: the static configuration starts tollgate (warnings: 2)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	c = config.NewCommand()
	if err := flag.Decode([]string{"--entryPoints.db.address=:5432", "--tcpServersTransport.dialTimeout=-1s"}, c); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Static(&c.Static, cmdline.Start{}, &out); err == nil || out.Len() != 0 {
		t.Errorf("a transport a start refuses: error %v, output %q; want the error alone", err, out.String())
	}
}
