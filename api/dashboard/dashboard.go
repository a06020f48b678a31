// Package dashboard is the admin API's /dashboard/ (api.dashboard): one
// page, one style sheet and one script, embedded in the binary, that read
// the admin API from the browser and change nothing. It serves files only:
// every figure it shows comes from an /api/... endpoint the page fetches
// (docs/operations/dashboard.md), so it shows nothing the API does not.
package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard/"

// contentSecurityPolicy keeps the page to its own files and its own
// origin's API: no inline script, no other host, no frame around it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files under Prefix (a request for Prefix
// gets the page), each with an ETag (its SHA-256), no-cache (a new binary
// serves new files at once) and the security headers above. Only GET and
// HEAD reach it through the API's routes.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	etags := map[string]string{}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(sub, p)
			sum := sha256.Sum256(b)
			etags["/"+p] = `"` + hex.EncodeToString(sum[:16]) + `"`
		}
		return nil
	})
	files := http.FileServerFS(sub)
	return http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + r.URL.Path)
		if p == "/" || p == "/index.html" {
			// FileServer redirects /index.html to ./; serve the page itself.
			p = "/index.html"
			r.URL.Path = "/"
		}
		h := w.Header()
		if tag, ok := etags[p]; ok {
			h.Set("ETag", tag)
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	}))
}
