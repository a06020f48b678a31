package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoURL is where the repository is published: docs pages link to files
// outside docs/ (which mkdocs does not serve) through it, and those links
// are checked against this checkout.
const repoURL = "https://github.com/tollgate-proxy/tollgate/"

// A citation of a doc section, from code or docs, a file and a heading in
// quotes (the README's, ARCHITECTURE.md's, bench/README.md's or a docs
// page's): `ARCHITECTURE.md, "The connection core"`,
// `docs/operations/upgrading.md, "What stays exact, and why"`.
var citationRE = regexp.MustCompile(`((?:[\w.-]+/)*(?:README|ARCHITECTURE)(?:\.md)?|docs/[\w./-]+\.md)(?:'s)?,?\s+"([^"]+)"`)

// A docs page or a bench run named in a comment or in prose, with an
// optional anchor.
var docPathRE = regexp.MustCompile(`\b(?:docs/[\w./-]+|bench/results/[\w.-]+)\.md(?:#[\w-]+)?`)

// `"Listeners" above`: a section of the same page.
var hereRE = regexp.MustCompile(`"([A-Z][^"]{1,60})" (above|below)`)

var mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// citeTarget returns the file a citation names, relative to the root.
func citeTarget(name string) string {
	switch {
	case strings.HasSuffix(name, ".md"):
		return name
	default:
		return name + ".md"
	}
}

// pageCache reads pages once.
type pageCache struct {
	root  string
	pages map[string]*page
}

func (c *pageCache) get(rel string) *page {
	if p, ok := c.pages[rel]; ok {
		return p
	}
	b, err := os.ReadFile(filepath.Join(c.root, rel))
	var p *page
	if err == nil {
		p = &page{path: rel, lines: strings.Split(string(b), "\n")}
	}
	c.pages[rel] = p
	return p
}

// resolveSection says what is wrong with a citation of section title in
// the file rel, or "".
func (c *pageCache) resolveSection(rel, title string) string {
	p := c.get(rel)
	if p == nil {
		return fmt.Sprintf("cites %s, which does not exist", rel)
	}
	if !p.hasHeading(title) {
		return fmt.Sprintf("cites %s, %q: no such heading there", rel, title)
	}
	return ""
}

// resolvePath says what is wrong with a reference to a file (relative to
// the root, optionally with #anchor), or "".
func (c *pageCache) resolvePath(rel string) string {
	rel, anchor, _ := strings.Cut(rel, "#")
	rel = strings.TrimSuffix(strings.TrimSuffix(rel, "/..."), "/")
	if matches, _ := filepath.Glob(filepath.Join(c.root, rel)); len(matches) == 0 {
		if exec.Command("git", "-C", c.root, "check-ignore", "-q", rel).Run() == nil {
			return "" // a build output (bench/.bin/tollgate), not committed
		}
		return fmt.Sprintf("names %s, which does not exist", rel)
	}
	if anchor != "" && strings.HasSuffix(rel, ".md") {
		if p := c.get(rel); p == nil || !p.hasHeading(anchor) {
			return fmt.Sprintf("links to %s#%s: no such heading there", rel, anchor)
		}
	}
	return ""
}

// Every citation of a doc section or file from the code (comments and
// strings) resolves to an existing file and heading.
func TestReferencesFromCode(t *testing.T) {
	c := &pageCache{root: root(t), pages: map[string]*page{}}
	n := 0
	eachGoFile(t, c.root, func(rel string, f *ast.File, fset *token.FileSet) {
		check := func(pos token.Pos, text string) {
			text = strings.Join(strings.Fields(text), " ")
			for _, m := range citationRE.FindAllStringSubmatch(text, -1) {
				n++
				if msg := c.resolveSection(citeTarget(m[1]), m[2]); msg != "" {
					t.Errorf("%s: %s", fset.Position(pos), msg)
				}
			}
			for _, m := range docPathRE.FindAllString(text, -1) {
				n++
				if msg := c.resolvePath(m); msg != "" {
					t.Errorf("%s: %s", fset.Position(pos), msg)
				}
			}
		}
		for _, cg := range f.Comments {
			check(cg.Pos(), cg.Text())
		}
		ast.Inspect(f, func(node ast.Node) bool {
			if lit, ok := node.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					check(lit.Pos(), s)
				}
			}
			return true
		})
	})
	if n < 20 {
		t.Errorf("only %d citations found in the code: the patterns are not matching", n)
	}
}

// Every link, section citation, file path and Go symbol of the docs
// resolves: markdown links to pages and their headings (a link to the
// published repository to the file in this checkout), "X" above/below to a
// heading of the page, backquoted paths to files, backquoted Go symbols
// (`proxy.Compile`, `Limiter.Export`, `TestUpgradeTenInARow`) to the code.
func TestReferencesFromDocs(t *testing.T) {
	c := &pageCache{root: root(t), pages: map[string]*page{}}
	syms := goSymbols(t, c.root)
	for _, p := range docPages(t) {
		c.pages[p.path] = p
		fenced := p.inFence()
		dir := filepath.ToSlash(filepath.Dir(p.path))
		for i, l := range p.lines {
			if fenced[i] {
				continue
			}
			where := fmt.Sprintf("%s:%d", p.path, i+1)
			for _, m := range mdLinkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				var msg string
				switch {
				case strings.HasPrefix(target, repoURL):
					rest := strings.TrimPrefix(target, repoURL)
					for _, pre := range []string{"blob/main/", "tree/main/"} {
						rest = strings.TrimPrefix(rest, pre)
					}
					msg = c.resolvePath(rest)
				case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:"):
					continue
				case strings.HasPrefix(target, "#"):
					if !p.hasHeading(target[1:]) {
						msg = fmt.Sprintf("links to #%s: no such heading on this page", target[1:])
					}
				default:
					path, anchor, _ := strings.Cut(target, "#")
					rel := filepath.ToSlash(filepath.Clean(filepath.Join(dir, path)))
					if strings.HasPrefix(p.path, "docs/") && !strings.HasPrefix(rel, "docs/") {
						msg = fmt.Sprintf("links to %s, outside docs/: mkdocs cannot serve it; link to %sblob/main/%s", rel, repoURL, rel)
						break
					}
					if anchor != "" {
						rel += "#" + anchor
					}
					msg = c.resolvePath(rel)
				}
				if msg != "" {
					t.Errorf("%s: %s", where, msg)
				}
			}
			for _, m := range citationRE.FindAllStringSubmatch(l, -1) {
				if msg := c.resolveSection(citeTarget(m[1]), m[2]); msg != "" {
					t.Errorf("%s: %s", where, msg)
				}
			}
			for _, m := range hereRE.FindAllStringSubmatch(l, -1) {
				if !p.hasHeading(m[1]) {
					t.Errorf("%s: %q %s: no such heading on this page", where, m[1], m[2])
				}
			}
			for _, m := range possessiveRE.FindAllStringSubmatch(l, -1) {
				if articles[strings.ToLower(m[1])] {
					continue
				}
				if msg := syms.checkOf(m[2], m[3]); msg != "" {
					t.Errorf("%s: %s's `%s`: %s", where, m[2], m[3], msg)
				}
			}
			for _, m := range inlineCode.FindAllStringSubmatch(l, -1) {
				code := m[1]
				if msg := c.checkCodePath(code); msg != "" {
					t.Errorf("%s: `%s` %s", where, code, msg)
				}
				if msg := syms.check(code); msg != "" {
					t.Errorf("%s: `%s`: %s", where, code, msg)
				}
			}
		}
	}
}

var repoPathRE = regexp.MustCompile(`^[\w.-]+(/[\w.*-]+)*/?$`)

// checkCodePath: a backquoted path into the repository must exist. Only
// paths starting with one of the repository's own top-level entries count
// (`proxy/goserve.go`, `scripts/k8s.sh`, `docs/`); `consul.d/db.json` is
// an example.
func (c *pageCache) checkCodePath(code string) string {
	if !repoPathRE.MatchString(code) || !strings.Contains(code, "/") || strings.Contains(code, "<") {
		return ""
	}
	first, _, _ := strings.Cut(code, "/")
	switch first {
	case "api", "bench", "check", "config", "deploy", "docs", "examples", "internal", "labels", "middleware", "provider", "proxy", "scripts", "testdata", ".ci":
	default:
		return ""
	}
	if strings.HasPrefix(code, "bench/results/") && strings.Count(code, "/") == 2 && !strings.HasSuffix(code, ".md") {
		return "" // a run's output folder, not committed
	}
	if msg := c.resolvePath(code); msg != "" {
		return "names a path that does not exist"
	}
	return ""
}

// symbols indexes the module's Go code: top-level names per package name,
// members (methods and fields) per type name, and test functions.
type symbols struct {
	pkgs  map[string]map[string]bool
	types map[string]map[string]bool
	tests map[string]bool
	// keys are the configuration's keys (YAML tags of package config),
	// lower case: `loadBalancer.terminationDelay` is a key, not a field of
	// proxy's loadBalancer type.
	keys map[string]bool
}

// fileExts are what `store.go`, `stack.yml` end with: file names, not
// Type.member.
var fileExts = map[string]bool{"go": true, "md": true, "yml": true, "yaml": true, "toml": true, "json": true, "sh": true, "txt": true, "kv": true, "labels": true, "crt": true, "key": true, "pem": true, "conf": true, "d": true, "jsonl": true, "log": true, "lock": true, "sum": true, "mod": true}

var (
	symbolRE = regexp.MustCompile(`^([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))(?:\.([A-Za-z_]\w*))?(?:\(.*\))?$`)
	testRE   = regexp.MustCompile(`^(Test|Benchmark|Fuzz)[A-Z]\w*$`)
)

func goSymbols(t *testing.T, dir string) *symbols {
	s := &symbols{pkgs: map[string]map[string]bool{}, types: map[string]map[string]bool{}, tests: map[string]bool{}, keys: map[string]bool{}}
	tagRE := regexp.MustCompile(`yaml:"([A-Za-z]\w*)`)
	add := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
	}
	eachGoFile(t, dir, func(rel string, f *ast.File, _ *token.FileSet) {
		pkg := f.Name.Name
		test := strings.HasSuffix(rel, "_test.go")
		if strings.HasPrefix(rel, "config/") && !test {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					for _, m := range tagRE.FindAllStringSubmatch(lit.Value, -1) {
						s.keys[strings.ToLower(m[1])] = true
					}
				}
				return true
			})
		}
		if pkg == "main" && !strings.Contains(rel, "/") {
			pkg = "tollgate"
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					if test && testRE.MatchString(d.Name.Name) {
						s.tests[d.Name.Name] = true
					}
					if !test {
						add(s.pkgs, pkg, d.Name.Name)
					}
					continue
				}
				if test {
					continue
				}
				recv := d.Recv.List[0].Type
				for {
					switch r := recv.(type) {
					case *ast.StarExpr:
						recv = r.X
						continue
					case *ast.IndexExpr:
						recv = r.X
						continue
					case *ast.IndexListExpr:
						recv = r.X
						continue
					}
					break
				}
				if id, ok := recv.(*ast.Ident); ok {
					add(s.types, id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				if test {
					continue
				}
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						add(s.pkgs, pkg, sp.Name.Name)
						if s.types[sp.Name.Name] == nil {
							s.types[sp.Name.Name] = map[string]bool{}
						}
						fieldsOf(sp.Type, func(name string) { add(s.types, sp.Name.Name, name) })
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							add(s.pkgs, pkg, n.Name)
						}
					}
				}
			}
		}
	})
	return s
}

// fieldsOf calls f with the names of a struct's fields (an embedded one by
// its type's name) and an interface's methods.
func fieldsOf(e ast.Expr, f func(string)) {
	switch e := e.(type) {
	case *ast.StructType:
		for _, fl := range e.Fields.List {
			for _, n := range fl.Names {
				f(n.Name)
			}
			if len(fl.Names) == 0 {
				typ := fl.Type
				if st, ok := typ.(*ast.StarExpr); ok {
					typ = st.X
				}
				switch x := typ.(type) {
				case *ast.Ident:
					f(x.Name)
				case *ast.SelectorExpr:
					f(x.Sel.Name)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range e.Methods.List {
			for _, n := range m.Names {
				f(n.Name)
			}
		}
	}
}

// member reports whether type typ (or a type it embeds, one level) has
// the method or field name.
func (s *symbols) member(typ, name string) bool {
	if s.types[typ][name] {
		return true
	}
	for emb := range s.types[typ] {
		if s.types[emb][name] {
			return true
		}
	}
	return false
}

// possessiveRE is "check's `hints`": a package's name, then a backquoted
// identifier said to be its (with the word before it: "a provider's
// `Recorder`", after an article, is English about a provider, not about the
// package).
var possessiveRE = regexp.MustCompile("(?:([A-Za-z]+)\\s+)?\\b([a-z][a-z0-9]*)'s `([A-Za-z_][A-Za-z0-9_]*)`")

var articles = map[string]bool{"a": true, "an": true, "the": true, "each": true, "every": true, "its": true, "one": true, "this": true, "that": true, "their": true, "any": true}

// checkOf says why pkg's name does not resolve when pkg is one of
// tollgate's packages, or "": a top-level name of the package, or a method
// or field of one of its types.
func (s *symbols) checkOf(pkg, name string) string {
	names, ok := s.pkgs[pkg]
	if !ok || pkg == "tollgate" || names[name] {
		return ""
	}
	for n := range names {
		if s.member(n, name) {
			return ""
		}
	}
	return fmt.Sprintf("package %s has no %s", pkg, name)
}

// check says why a backquoted text that reads as a Go symbol of tollgate's
// does not resolve, or "".
func (s *symbols) check(code string) string {
	if testRE.MatchString(code) {
		if !s.tests[code] {
			return "no such test, benchmark or fuzz target in the code"
		}
		return ""
	}
	m := symbolRE.FindStringSubmatch(code)
	if m == nil {
		return ""
	}
	a, b, c := m[1], m[2], m[3]
	exported := func(n string) bool { return n != "" && n[0] >= 'A' && n[0] <= 'Z' }
	if c == "" && fileExts[b] {
		return "" // a file name
	}
	if names, isPkg := s.pkgs[a]; isPkg && exported(b) && a != "tollgate" {
		if !names[b] {
			if _, isType := s.types[a]; isType && s.member(a, b) {
				return ""
			}
			return fmt.Sprintf("package %s has no %s", a, b)
		}
		if c != "" && !s.member(b, c) {
			return fmt.Sprintf("%s.%s has no method or field %s", a, b, c)
		}
		return ""
	}
	if _, isType := s.types[a]; isType && c == "" && (exported(a) || !s.keys[strings.ToLower(a)]) {
		if !s.member(a, b) {
			return fmt.Sprintf("type %s has no method or field %s", a, b)
		}
		return ""
	}
	if exported(a) && exported(b) && c == "" && !strings.Contains(code, "(") {
		return fmt.Sprintf("reads as Type.Member, but tollgate has no type %s", a)
	}
	return ""
}

// eachGoFile parses every .go file of the repository (both modules; not
// testdata, not git's or the bench's outputs).
func eachGoFile(t *testing.T, dir string, fn func(rel string, f *ast.File, fset *token.FileSet)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		fn(filepath.ToSlash(rel), f, fset)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
