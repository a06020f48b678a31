package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzFiles: whatever a file holds, check reports problems and never
// panics, and a problem always names the file.
func FuzzFiles(f *testing.F) {
	for _, name := range []string{"compose-problems.yml", "unknown-key.yml", "missing-refs.toml", "hostsni-no-tls.labels", "extensions.yml", "consul-services.json", "stack-services.yml", "consul-kv-export.json", "kv-lines.kv", "template-error.yml"} {
		b, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), filepath.Ext(name))
	}
	f.Add("services:\n  a:\n    labels: 3\n    ports: [{target: x}, \"1-2/udp\"]\n", ".yml")
	f.Fuzz(func(t *testing.T, content, ext string) {
		if strings.Contains(content, "{{") && (strings.Contains(content, "range") || strings.Contains(content, "getHostByName")) {
			return // bounded in size, not in time, or a DNS lookup: see provider/file's FuzzRender
		}
		switch ext {
		case ".yml", ".toml", ".labels", ".json":
		default:
			ext = ".labels"
		}
		path := filepath.Join(t.TempDir(), "in"+ext)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		rep := Files([]string{path}, DefaultOptions())
		if rep == nil || rep.TCP == nil {
			t.Fatal("no report")
		}
		for _, p := range rep.Problems {
			if p.File != path {
				t.Fatalf("problem names %q, not the file %q: %+v", p.File, path, p)
			}
		}
	})
}
