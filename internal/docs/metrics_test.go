package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The metrics page lists exactly the series the code exports: every
// prometheus.NewDesc name of the api package, tollgate's and Traefik's, is
// a row of docs/reference/metrics.md, and every row is one of them.
func TestMetricsDocumented(t *testing.T) {
	dir := root(t)
	exported := map[string]bool{}
	descRE := regexp.MustCompile(`NewDesc\(\s*"((?:tollgate|traefik)_[a-z0-9_]+)"`)
	files, err := filepath.Glob(filepath.Join(dir, "api", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range descRE.FindAllStringSubmatch(string(b), -1) {
			exported[m[1]] = true
		}
	}
	if len(exported) < 30 {
		t.Fatalf("only %d metric names found in api/*.go: the pattern no longer matches how they are declared", len(exported))
	}
	page, err := os.ReadFile(filepath.Join(dir, "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^\\| `((?:tollgate|traefik)_[a-z0-9_]+)` \\|")
	documented := map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(string(page), -1) {
		documented[m[1]] = true
	}
	var missing, extra []string
	for n := range exported {
		if !documented[n] {
			missing = append(missing, n)
		}
	}
	for n := range documented {
		if !exported[n] {
			extra = append(extra, n)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("exported but not in docs/reference/metrics.md's table: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("in docs/reference/metrics.md's table but not exported by api/: %v", extra)
	}
}
