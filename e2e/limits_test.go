package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// A dynamic file over a limit (limits.maxRouters, maxRuleLength,
// maxSourceRanges, maxFileSize, set small here) is refused with an error
// naming the limit, in the log and in the file provider's status, and the
// last good configuration keeps serving; a file within the limits applies
// again. The default maxRuleLength (4 MiB) refuses a rule of 4.3 MB.
func TestLimitsRefuseAndKeepServing(t *testing.T) {
	old, next := bannerServer(t, "old"), bannerServer(t, "new")
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yml")
	write := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, ".fleet.yml.tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	fleet := func(n int, last string) string {
		return string(itest.Fleet{N: n, EntryPoint: "tcp", Backend: old, Last: last}.Bytes())
	}
	ep := itest.FreeAddr(t)
	write(fleet(3, old))
	p := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep, "--providers.file.filename="+path, "--providers.file.watch=true",
		"--limits.maxRouters=5", "--limits.maxRuleLength=100", "--limits.maxSourceRanges=3", "--limits.maxFileSize=4096")
	itest.Eventually(t, 10*time.Second, func() bool { return bannerOf(ep) == "old" }, "the first file was not applied")

	allowList := func(ranges int) string {
		var b strings.Builder
		b.WriteString(fleet(2, next))
		b.WriteString("    allow:\n      ipAllowList:\n        sourceRange:\n")
		for i := range ranges {
			fmt.Fprintf(&b, "        - 10.0.%d.0/24\n", i)
		}
		return b.String()
	}
	for _, c := range []struct{ name, content, want string }{
		{"routers", fleet(6, next), "6 TCP routers, over limits.maxRouters (5)"},
		{"rule", strings.Replace(fleet(2, next), "HostSNI(`*`)", "HostSNI(`*`) || ClientIP(`10.0.0.0/8`)"+strings.Repeat(" || ClientIP(`10.0.0.1`)", 4), 1), "over limits.maxRuleLength (100)"},
		{"ranges", allowList(4), `middleware "allow": ipAllowList of 4 source ranges, over limits.maxSourceRanges (3)`},
		{"size", fleet(2, next) + "# " + strings.Repeat("x", 4096) + "\n", "over limits.maxFileSize (4096 bytes)"},
	} {
		write(c.content)
		itest.Eventually(t, 10*time.Second, func() bool {
			pr := p.Rawdata(t).Provider("file")
			return pr.State == "error" && strings.Contains(pr.LastError, c.want)
		}, "%s: no provider error naming %q", c.name, c.want)
		if !strings.Contains(p.Out.String(), strings.ReplaceAll(c.want, `"`, `\"`)) { // JSON lines
			t.Fatalf("%s: the log does not say %q", c.name, c.want)
		}
		if b := bannerOf(ep); b != "old" {
			t.Fatalf("%s: banner %q: the last good configuration does not serve", c.name, b)
		}
	}
	write(allowList(3))
	itest.Eventually(t, 10*time.Second, func() bool { return bannerOf(ep) == "new" }, "a file within the limits was not applied")

	// The default rule length.
	ep2 := itest.FreeAddr(t)
	path2 := filepath.Join(t.TempDir(), "d.yml")
	good := string(itest.Fleet{N: 1, EntryPoint: "tcp", Backend: old}.Bytes())
	if err := os.WriteFile(path2, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	p2 := itest.StartTollgate(t, "--entryPoints.tcp.address="+ep2, "--providers.file.filename="+path2, "--providers.file.watch=true")
	itest.Eventually(t, 10*time.Second, func() bool { return bannerOf(ep2) == "old" }, "the default-limits file was not applied")
	long := strings.Replace(string(itest.Fleet{N: 1, EntryPoint: "tcp", Backend: next}.Bytes()), "HostSNI(`*`)", "HostSNI(`*`)"+strings.Repeat(" || ClientIP(`10.0.0.1`)", 180000), 1)
	tmp := path2 + ".tmp"
	if err := os.WriteFile(tmp, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path2); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(p2.Rawdata(t).Provider("file").LastError, "over limits.maxRuleLength (4194304)")
	}, "a rule of %d bytes was not refused by the default limit", len(long))
	if b := bannerOf(ep2); b != "old" {
		t.Fatalf("banner %q after the refused rule: the last good configuration does not serve", b)
	}
}
