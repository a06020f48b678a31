package docs

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated pages (docs/reference/static-options.md) instead of comparing them")

// root is the module root, where the docs are.
func root(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// The static options page is what the code generates: every option of
// config.Command, with the default and description `tollgate --help` prints.
func TestStaticReference(t *testing.T) {
	want, err := StaticOptionsMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root(t), StaticOptionsPage)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: generate it with go generate ./internal/docs/", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "<end>", "<end>"
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from what config/static.go generates, first at line %d:\n got: %s\nwant: %s\n(go generate ./internal/docs/ rewrites it)", StaticOptionsPage, i+1, g, w)
			}
		}
	}
}

// The options are spelled as their YAML keys, each listed once, and the
// variable form of an option is what tollgate reads.
func TestStaticOptionsDescribed(t *testing.T) {
	opts, err := StaticOptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) < 200 {
		t.Fatalf("only %d static options: the walk of config.Command lost some", len(opts))
	}
	seen := map[string]bool{}
	for _, o := range opts {
		if seen[o.Path] {
			t.Errorf("option %s listed twice", o.Path)
		}
		seen[o.Path] = true
	}
	for _, p := range []string{"entryPoints.<name>.address", "providers.consulCatalog.endpoint.address", "stores.<name>.redis.leaseExpiry", "log.level"} {
		if !seen[p] {
			t.Errorf("option %s missing (spelled as its YAML key)", p)
		}
	}
	if got := (Option{Path: "entryPoints.<name>.address"}).Env(); got != "TOLLGATE_ENTRYPOINTS_<NAME>_ADDRESS" {
		t.Errorf("Env() = %s", got)
	}
}
