package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// A dynamic file whose template would run for ever (two nested ranges of
// 100,000) is stopped by its render's budget: the error naming the file is
// logged, the file keeps its last good configuration (a connection through
// it works), an edit of another file in the directory is applied, and
// SIGTERM ends the process within the grace time and a small margin.
// Before the budget, the render pinned a core for good: nothing after it was
// applied and the shutdown never ended.
func TestFileTemplateOverBudgetKeepsServing(t *testing.T) {
	be := itest.EchoServer(t, "")
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	route := func(name, ep string, amount int) string {
		return fmt.Sprintf("tcp:\n  routers:\n    %[1]s:\n      entryPoints: [%[2]s]\n      rule: \"HostSNI(`*`)\"\n      service: %[1]s\n      middlewares: [%[1]s]\n"+
			"  middlewares:\n    %[1]s:\n      inFlightConn:\n        amount: %[3]d\n"+
			"  services:\n    %[1]s:\n      loadBalancer:\n        servers:\n          - address: %[4]q\n", name, ep, amount, be)
	}
	write("a.yml", route("a", "one", 2))
	write("b.yml", route("b", "two", 2))
	one, two := itest.FreeAddr(t), itest.FreeAddr(t)
	const grace = time.Second
	p := itest.StartTollgate(t, "--entryPoints.one.address="+one, "--entryPoints.two.address="+two,
		"--entryPoints.one.transport.lifeCycle.graceTimeOut="+grace.String(), "--entryPoints.two.transport.lifeCycle.graceTimeOut="+grace.String(),
		"--providers.file.directory="+dir, "--providers.file.watch=true")
	itest.Eventually(t, 10*time.Second, func() bool {
		rd := p.Rawdata(t)
		return rd.Routers["a@file"].Status == "enabled" && rd.Routers["b@file"].Status == "enabled"
	}, "a@file and b@file not enabled")

	bPath := filepath.Join(dir, "b.yml")
	write("b.yml", "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}\n"+route("b", "two", 5))
	itest.Eventually(t, 10*time.Second, func() bool {
		for _, pr := range p.Rawdata(t).Provider("file").Problems {
			if strings.Contains(pr, bPath) && strings.Contains(pr, "rendering stopped: more than 1000000 steps") && strings.Contains(pr, "keeping this file's last good configuration") {
				return true
			}
		}
		return false
	}, "no problem naming %s and its budget in /api/rawdata", bPath)
	if out := p.Out.String(); !strings.Contains(out, bPath) || !strings.Contains(out, "rendering stopped") {
		t.Fatalf("the log does not name %s and its budget:\n%s", bPath, out)
	}
	c := itest.Hold(t, 1, "127.0.0.1", two)
	if len(c) != 1 || !itest.Echoes(c[0]) {
		t.Fatal("no connection through b.yml's last good configuration")
	}
	itest.CloseAll(c)
	if got := p.Rawdata(t).AmountOf("b@file"); got != 2 {
		t.Fatalf("b@file amount %d, want its last good 2", got)
	}

	write("a.yml", route("a", "one", 3))
	itest.Eventually(t, 10*time.Second, func() bool { return p.Rawdata(t).AmountOf("a@file") == 3 },
		"an edit of a.yml was not applied while b.yml is over its budget")

	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(grace + 5*time.Second):
		t.Fatalf("still running %s after SIGTERM (grace %s)", time.Since(start).Round(time.Millisecond), grace)
	}
	d := time.Since(start)
	if d > grace+3*time.Second {
		t.Fatalf("SIGTERM took %s, over the grace %s and a 3 s margin", d.Round(time.Millisecond), grace)
	}
	t.Logf("SIGTERM to exit: %s", d.Round(time.Millisecond))
}
