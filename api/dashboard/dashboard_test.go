package dashboard

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestAssetsAreSelfContained: the page fetches nothing from another host
// (no CDN: the only absolute URL is the SVG namespace, a name), builds no
// HTML from strings (innerHTML would run markup from labels anyone may
// write), and stays small.
func TestAssetsAreSelfContained(t *testing.T) {
	total := 0
	urls := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"'<>)]*`)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		if err != nil {
			return err
		}
		total += len(b)
		for _, u := range urls.FindAllString(string(b), -1) {
			if u != "http://www.w3.org/2000/svg" {
				t.Errorf("%s refers to %s: the dashboard must fetch nothing from elsewhere", p, u)
			}
		}
		if strings.HasSuffix(p, ".js") {
			for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
				if strings.Contains(string(b), bad) {
					t.Errorf("%s uses %s", p, bad)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 || total > 100<<10 {
		t.Errorf("the dashboard's files are %d bytes, want some, and under 100 KiB", total)
	}
}
