package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// page is one markdown file of the documentation.
type page struct {
	path  string // relative to the module root, slash-separated
	lines []string
}

// codeBlock is a fenced code block and the HTML comments right above it.
type codeBlock struct {
	page    *page
	line    int    // 1-based line of the opening fence
	lang    string // the info string's first word, lower case
	text    string // the content, the fence's indentation removed
	markers []string
}

// docPages are the markdown files the documentation is made of: README.md,
// ARCHITECTURE.md, bench/README.md, examples' and deploy's READMEs, and
// every page under docs/.
func docPages(t testing.TB) []*page {
	t.Helper()
	dir := root(t)
	paths := []string{"README.md", "ARCHITECTURE.md", "bench/README.md", "examples/README.md", "examples/swarm/README.md", "deploy/README.md"}
	err := filepath.WalkDir(filepath.Join(dir, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(dir, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*page
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &page{path: p, lines: strings.Split(string(b), "\n")})
	}
	return out
}

var fenceRE = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")

// blocks returns the fenced code blocks of p, with the HTML comment lines
// directly above each (blank lines between them allowed).
func (p *page) blocks() []codeBlock {
	var out []codeBlock
	for i := 0; i < len(p.lines); i++ {
		m := fenceRE.FindStringSubmatch(p.lines[i])
		if m == nil {
			continue
		}
		indent, fence := len(m[1]), m[2]
		b := codeBlock{page: p, line: i + 1, lang: strings.ToLower(m[3])}
		for j := i - 1; j >= 0; j-- {
			l := strings.TrimSpace(p.lines[j])
			if l == "" {
				continue
			}
			if strings.HasPrefix(l, "<!--") && strings.HasSuffix(l, "-->") {
				b.markers = append([]string{strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(l, "<!--"), "-->"))}, b.markers...)
				continue
			}
			break
		}
		var body []string
		j := i + 1
		for ; j < len(p.lines); j++ {
			if strings.HasPrefix(strings.TrimSpace(p.lines[j]), fence) && strings.Trim(strings.TrimSpace(p.lines[j]), string(fence[0])) == "" {
				break
			}
			l := p.lines[j]
			if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
				l = l[indent:]
			}
			body = append(body, l)
		}
		b.text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
		i = j
	}
	return out
}

// inFence reports, for each line of p, whether it is inside a fenced code
// block (fences included).
func (p *page) inFence() []bool {
	out := make([]bool, len(p.lines))
	for _, b := range p.blocks() {
		n := strings.Count(b.text, "\n")
		for i := b.line - 1; i <= b.line+n && i < len(out); i++ {
			out[i] = true
		}
	}
	return out
}

// heading is a markdown heading with its anchor.
type heading struct {
	level  int
	text   string
	anchor string
	line   int
}

var headingRE = regexp.MustCompile(`^(#{1,6})\s+(.+?)\s*#*\s*$`)

// headings returns p's ATX headings outside code blocks, with the anchors
// mkdocs gives them (Python-Markdown's toc slugify, with "_1" suffixes for
// repeats).
func (p *page) headings() []heading {
	fenced := p.inFence()
	var out []heading
	seen := map[string]int{}
	for i, l := range p.lines {
		if fenced[i] {
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		text := m[2]
		a := slugify(text)
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a += "_" + itoa(n+1)
		} else {
			seen[a] = 0
		}
		out = append(out, heading{level: len(m[1]), text: text, anchor: a, line: i + 1})
	}
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

var (
	inlineCode  = regexp.MustCompile("`([^`]*)`")
	inlineLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	slugDrop    = regexp.MustCompile(`[^\w\s-]`)
	slugSpacing = regexp.MustCompile(`[-\s]+`)
)

// slugify is Python-Markdown's toc slugify (what mkdocs uses) on a
// heading's text as rendered: markup removed, ASCII only, lower case,
// punctuation dropped, runs of spaces and hyphens one hyphen.
func slugify(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	text = inlineCode.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("**", "", "__", "", "*", "").Replace(text)
	text = strings.Map(func(r rune) rune {
		if r > unicode.MaxASCII {
			return -1
		}
		return r
	}, text) // the headings are ASCII: no NFKD needed
	text = slugDrop.ReplaceAllString(text, "")
	text = strings.ToLower(strings.TrimSpace(text))
	return slugSpacing.ReplaceAllString(text, "-")
}

// hasHeading reports whether p has a heading whose text is title (markup
// ignored, case-insensitive), or whose anchor is title.
func (p *page) hasHeading(title string) bool {
	want := slugify(title)
	return slices.ContainsFunc(p.headings(), func(h heading) bool { return h.anchor == want || h.anchor == title })
}

func TestSlugify(t *testing.T) {
	for in, want := range map[string]string{
		"Upgrading in place":                                    "upgrading-in-place",
		"`inFlightConn`: what differs from Traefik":             "inflightconn-what-differs-from-traefik",
		"Why was this connection refused?":                      "why-was-this-connection-refused",
		"Servers transports":                                    "servers-transports",
		"The usual chain: ipAllowList, rateLimit, inFlightConn": "the-usual-chain-ipallowlist-ratelimit-inflightconn",
	} {
		if got := slugify(in); got != want {
			t.Errorf("slugify(%q) = %q, want %q", in, got, want)
		}
	}
}
