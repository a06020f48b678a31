package docs

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/traefik/paerser/flag"
	"github.com/traefik/paerser/generator"
	ptypes "github.com/traefik/paerser/types"

	"github.com/tollgate-proxy/tollgate/config"
)

// StaticOptionsPage is the generated page, relative to the module root.
const StaticOptionsPage = "docs/reference/static-options.md"

// Option is one static configuration option as the reference lists it.
type Option struct {
	// Path is the option's key with Traefik's spelling, dots between
	// segments, `<name>` for a map key and `[n]` for a list index
	// ("entryPoints.<name>.address").
	Path string
	// Default is the value `tollgate --help` shows (durations in seconds
	// get their unit), "" when none.
	Default string
	// Description is the option's description tag.
	Description string
}

// Flag is the option as a command-line flag.
func (o Option) Flag() string { return "--" + o.Path }

// Env is the option as an environment variable (TOLLGATE_ prefix; a map
// key or list index is written in its place).
func (o Option) Env() string {
	r := strings.NewReplacer(".", "_", "<name>", "<NAME>", "[n]", "_<N>")
	return "TOLLGATE_" + strings.ToUpper(r.Replace(o.Path))
}

// StaticOptions lists every static configuration option in the order of
// its key, with the default and description `tollgate --help` prints (the
// same paerser encoding of config.NewCommand with its defaults generated),
// each path segment spelled as its YAML key.
func StaticOptions() ([]Option, error) {
	cmd := config.NewCommand()
	generator.Generate(cmd)
	flats, err := flag.Encode(cmd)
	if err != nil {
		return nil, err
	}
	spell := spellings(reflect.TypeOf(cmd).Elem())
	var out []Option
	for _, f := range flats {
		segs := strings.Split(f.Name, ".")
		var path []string
		var typ reflect.Type
		node := spell
		for _, s := range segs {
			idx := ""
			if i := strings.Index(s, "["); i >= 0 {
				s, idx = s[:i], "[n]"
			}
			if s == "<name>" {
				path = append(path, s)
				node = node.child("<name>")
				continue
			}
			n := node.child(s)
			if n == nil {
				return nil, fmt.Errorf("static option %q: no field %q in config.Command", f.Name, s)
			}
			path = append(path, n.name+idx)
			typ, node = n.typ, n
		}
		def := f.Default
		if typ == reflect.TypeOf(ptypes.Duration(0)) || typ == reflect.TypeOf(new(ptypes.Duration)) {
			if def != "" && strings.Trim(def, "0123456789") == "" {
				def += "s" // paerser prints a duration as whole seconds
			}
		}
		out = append(out, Option{Path: strings.Join(path, "."), Default: def, Description: f.Description})
	}
	slices.SortStableFunc(out, func(a, b Option) int { return strings.Compare(strings.ToLower(a.Path), strings.ToLower(b.Path)) })
	return out, nil
}

// spelling is a node of the static configuration's type tree, by the
// lower-case segment paerser uses, with the YAML key's spelling.
type spelling struct {
	name     string
	typ      reflect.Type
	children map[string]*spelling
}

func (s *spelling) child(lower string) *spelling {
	if s == nil {
		return nil
	}
	return s.children[lower]
}

// spellings walks t's exported fields (embedded structs inlined, as
// paerser does), keyed by the lower-case YAML key.
func spellings(t reflect.Type) *spelling {
	root := &spelling{typ: t, children: map[string]*spelling{}}
	var walk func(n *spelling, t reflect.Type, depth int)
	walk = func(n *spelling, t reflect.Type, depth int) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() == reflect.Map {
			c := &spelling{name: "<name>", typ: t.Elem(), children: map[string]*spelling{}}
			n.children["<name>"] = c
			walk(c, t.Elem(), depth+1)
			return
		}
		if t.Kind() != reflect.Struct || depth > 12 {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous {
				walk(n, f.Type, depth)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				name = f.Name
			}
			c := &spelling{name: name, typ: f.Type, children: map[string]*spelling{}}
			n.children[strings.ToLower(name)] = c
			walk(c, f.Type, depth+1)
		}
	}
	walk(root, t, 0)
	return root
}

// StaticOptionsMarkdown is the generated reference page: one table per
// top-level section.
func StaticOptionsMarkdown() (string, error) {
	opts, err := StaticOptions()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(`<!-- Generated from config/static.go by internal/docs (go generate ./internal/docs/): do not edit. -->

# Static options

Every option of the static configuration, with its default and what it does, generated from
the code (the description of each field of ` + "`config.Static`" + `, as ` + "`tollgate --help`" + ` prints
it). How to give them, and what the sources mean together: [Static configuration](static-configuration.md).

Each option is written the same way in the three sources:

- a flag: ` + "`--entryPoints.db.address=:5432`" + ` (names are case-insensitive; ` + "`<name>`" + ` is a name you
  choose, ` + "`[n]`" + ` a list index; a list may also be given as one comma-separated value);
- an environment variable: ` + "`TOLLGATE_ENTRYPOINTS_DB_ADDRESS=:5432`" + ` (Traefik's ` + "`TRAEFIK_`" + ` prefix is read
  when no ` + "`TOLLGATE_`" + ` variable is set);
- a key of the configuration file (` + "`--configFile`" + `, YAML or TOML): ` + "`entryPoints: {db: {address: \":5432\"}}`" + `.

An option whose default is ` + "`false`" + ` and that has options below it (` + "`--providers.docker`" + `) turns the
section on with its defaults. A duration is a Go duration (` + "`10s`" + `, ` + "`1m30s`" + `) or a number of seconds.
A default of ` + "`0`" + ` or ` + "`0s`" + ` often stands for a built-in value that the description names.
`)
	// One section per top-level key; a provider with options of its own is
	// a section of its own, after the providers' common options.
	parents := map[string]bool{}
	for _, o := range opts {
		if p := strings.Split(o.Path, "."); len(p) >= 3 && p[0] == "providers" {
			parents[p[0]+"."+p[1]] = true
		}
	}
	sectionOf := func(o Option) string {
		p := strings.Split(o.Path, ".")
		if len(p) >= 2 && parents[p[0]+"."+p[1]] {
			return p[0] + "." + p[1]
		}
		return p[0]
	}
	slices.SortStableFunc(opts, func(a, b Option) int {
		return strings.Compare(strings.ToLower(sectionOf(a)), strings.ToLower(sectionOf(b)))
	})
	section := ""
	for _, o := range opts {
		if top := sectionOf(o); top != section {
			section = top
			fmt.Fprintf(&b, "\n## %s\n\n", top)
			b.WriteString("| option | default | description |\n|---|---|---|\n")
		}
		def := "—"
		if o.Default != "" {
			def = "`" + o.Default + "`"
		}
		desc := strings.ReplaceAll(strings.Join(strings.Fields(o.Description), " "), "|", `\|`)
		if desc == "" {
			desc = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", o.Path, def, desc)
	}
	return b.String(), nil
}
