package check

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// tollgate check places geoIP's and crowdSec's problems on their keys, and
// its report never shows a crowdSec apiKey (config.TCPCrowdSec.MarshalJSON).
func TestAccessMiddlewares(t *testing.T) {
	in := filepath.Join(goldenDir, "access.yml")
	var out, errs bytes.Buffer
	code, err := Run([]string{in}, &out, &errs)
	if err != nil || code != 1 {
		t.Fatalf("exit %d, %v: want 1 (router db uses a broken middleware)", code, err)
	}
	if strings.Contains(out.String()+errs.String(), "4f1c0ffee") || !strings.Contains(out.String(), `"apiKey": "REDACTED"`) {
		t.Fatalf("the report shows the key, or not as REDACTED:\n%s", out.String())
	}
	rep := Files([]string{in}, DefaultOptions())
	type at struct {
		severity string
		line     int
	}
	want := map[string]at{
		"tcp.middlewares.typo.geoIP.denyCountries": {"error", 22},
		"tcp.middlewares.geo.geoIP.allowCountries": {"warning", 18},
	}
	for _, p := range rep.Problems {
		if w, ok := want[p.Key]; ok && p.Severity == w.severity && p.Line == w.line {
			delete(want, p.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("not reported on their lines: %v\nproblems: %+v", want, rep.Problems)
	}
}
