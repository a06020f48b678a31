package file

// A dynamic file decoded one resource at a time, when decoding it whole
// fails: a key that does not decode (unknown, a value of the wrong type)
// drops only the router, service, middleware, servers transport, TLS
// option set, store or certificate it is in, with an error naming the file,
// line and key; the rest of the file applies (docs/reference/providers/file.md).

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/provider"
)

// DroppedError is a resource of a dynamic file left out because a key of
// it does not decode: where (the DecodeError, placed on the key) and which
// resource. The rest of the file applies.
type DroppedError struct {
	*DecodeError
	Resource provider.Resource
}

func (e *DroppedError) dropped() string {
	return fmt.Sprintf(": %s %q is dropped", e.Resource.Kind, e.Resource.Name)
}

func (e *DroppedError) Error() string   { return e.DecodeError.Error() + e.dropped() }
func (e *DroppedError) Message() string { return e.DecodeError.Message() + e.dropped() }
func (e *DroppedError) Unwrap() error   { return e.DecodeError }

// DecodeResources decodes YAML or TOML content as DecodeContent does, and
// when that fails, decodes each resource of it on its own: d holds the
// resources that decode, dropped the others (by kind, provider.Sections'
// order, then by name). err is set, as by DecodeContent, when the file is
// not applied at all: it does not parse, something outside the resources
// does not decode, or none of its resources does (a file caught mid-edit
// keeps its last configuration, as one that does not parse).
func DecodeResources(content, ext, name string) (d *config.Dynamic, dropped []*DroppedError, err error) {
	d, err = DecodeContent(content, ext, name)
	if err == nil {
		return d, nil, nil
	}
	whole := err
	data, perr := raw(content, ext)
	if perr != nil {
		return nil, nil, whole
	}
	rest, pieces := split(data)
	if len(pieces) == 0 {
		return nil, nil, whole
	}
	if _, err := decodeRaw(rest, name); err != nil {
		return nil, nil, whole
	}
	d = &config.Dynamic{}
	decoded := 0
	pl := &placer{content: content, ext: ext}
	for _, p := range pieces {
		pd, err := decodeRaw(p.doc, name)
		if err != nil {
			dropped = append(dropped, pl.blame(p, name, err))
			continue
		}
		decoded++
		d.AddResources(pd)
	}
	if len(dropped) == 0 || decoded == 0 {
		// Each decodes alone but not together, or none decodes: the file
		// as a whole is in error.
		return nil, nil, whole
	}
	return d, dropped, nil
}

// DecodeAll is Decode that keeps what decodes (DecodeResources): a file's
// content rendered as a template, then decoded one resource at a time when
// decoding it whole fails. The errors of a template are placed on the text
// it renders (DecodeError.Rendered).
func DecodeAll(content, ext, name string) (d *config.Dynamic, rendered string, dropped []*DroppedError, err error) {
	rendered, err = Render(content, name)
	if err != nil {
		return nil, "", nil, err
	}
	d, dropped, err = DecodeResources(rendered, ext, name)
	if rendered != content {
		var de *DecodeError
		if errors.As(err, &de) {
			de.Rendered = true
		}
		for _, e := range dropped {
			e.Rendered = true
		}
	}
	return d, rendered, dropped, err
}

// raw parses content into the tree paerser's file decoder starts from.
func raw(content, ext string) (map[string]any, error) {
	data := map[string]any{}
	switch strings.ToLower(ext) {
	case ".toml":
		if _, err := toml.Decode(content, &data); err != nil {
			return nil, err
		}
	default:
		if err := yaml.Unmarshal([]byte(content), &data); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// piece is one resource of a file: its path as written ("tcp", "routers",
// "r"; a certificate's index for its name) and a document holding it alone.
type piece struct {
	res  provider.Resource
	path []string
	doc  map[string]any
}

// split takes the resources out of data: rest is data without them (it
// must decode on its own), pieces the resources, each in a document of its
// own. data is not modified.
func split(data map[string]any) (rest map[string]any, pieces []piece) {
	rest = map[string]any{}
	for _, top := range slices.Sorted(maps.Keys(data)) {
		sec, ok := data[top].(map[string]any)
		if !ok {
			rest[top] = data[top]
			continue
		}
		kept := map[string]any{}
		for _, key := range slices.Sorted(maps.Keys(sec)) {
			kind := ""
			for _, rk := range provider.Sections {
				if strings.EqualFold(top, rk.Section) && strings.EqualFold(key, rk.Key) {
					kind = rk.Kind
				}
			}
			switch v := sec[key].(type) {
			case map[string]any:
				if kind == "" || kind == provider.KindTLSCertificate {
					break
				}
				for _, name := range slices.Sorted(maps.Keys(v)) {
					pieces = append(pieces, piece{res: provider.Resource{Kind: kind, Name: name}, path: []string{top, key, name},
						doc: map[string]any{top: map[string]any{key: map[string]any{name: v[name]}}}})
				}
				continue
			case []any, []map[string]any: // YAML's lists, TOML's arrays of tables
				if kind != provider.KindTLSCertificate {
					break
				}
				list := reflect.ValueOf(v)
				for i := range list.Len() {
					pieces = append(pieces, piece{res: provider.Resource{Kind: kind, Name: strconv.Itoa(i)}, path: []string{top, key, strconv.Itoa(i)},
						doc: map[string]any{top: map[string]any{key: []any{list.Index(i).Interface()}}}})
				}
				continue
			}
			kept[key] = sec[key]
		}
		if len(kept) > 0 || len(sec) == 0 {
			rest[top] = kept // a section emptied of its resources is not in the rest
		}
	}
	slices.SortStableFunc(pieces, func(a, b piece) int { return kindOrder(a.res.Kind) - kindOrder(b.res.Kind) })
	return rest, pieces
}

func kindOrder(kind string) int {
	for i, rk := range provider.Sections {
		if rk.Kind == kind {
			return i
		}
	}
	return len(provider.Sections)
}

// decodeRaw decodes a document of split with paerser, as DecodeContent
// decodes a file (through YAML text: paerser reads a tree from text only).
func decodeRaw(doc map[string]any, name string) (*config.Dynamic, error) {
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	d, err := DecodeContent(string(b), ".yml", name)
	var de *DecodeError
	if errors.As(err, &de) {
		return nil, de.Err // placed on the file's own lines by blame
	}
	return d, err
}

// placer places the errors of a file's resources on its lines; it parses
// the file once, on first use, however many resources are dropped.
type placer struct {
	content, ext string
	parsed       bool
	toml         decodeerr.TOMLIndex
	yaml         *yaml.Node // the document's root; nil when it does not parse
}

// blame places err, the error of decoding p alone, on a key of p in the
// file's content: the key the error names, else p itself.
func (pl *placer) blame(p piece, name string, err error) *DroppedError {
	de := &DecodeError{File: name, Err: err}
	de.Key, de.Line = pl.under(p.path, err)
	if de.Key == "" {
		de.Key = strings.Join(p.path, ".")
	}
	return &DroppedError{DecodeError: de, Resource: p.res}
}

func (pl *placer) parse() {
	if pl.parsed {
		return
	}
	pl.parsed = true
	if strings.EqualFold(pl.ext, ".toml") {
		pl.toml = decodeerr.IndexTOML(pl.content)
		return
	}
	var doc yaml.Node
	if yaml.Unmarshal([]byte(pl.content), &doc) == nil && doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		pl.yaml = doc.Content[0]
	}
}

// under is decodeerr.Blame looking only below path (as written): the key
// and line err is about, else where path itself is written.
func (pl *placer) under(path []string, err error) (key string, line int) {
	pl.parse()
	if pl.toml != nil {
		prefix := strings.ToLower(strings.Join(path, "."))
		if len(path) == 3 && strings.EqualFold(path[1], "certificates") {
			prefix = strings.ToLower(path[0] + "." + path[1]) // [[tls.certificates]] elements share their path
		}
		below := decodeerr.TOMLIndex{}
		for k, v := range pl.toml {
			if k == prefix || strings.HasPrefix(k, prefix+".") {
				below[k] = v
			}
		}
		if k, ok := below.Blame(err.Error()); ok {
			return k.Written, k.Line
		}
		if k, ok := pl.toml.Find(path, 1); ok {
			return k.Written, k.Line
		}
		return "", 0
	}
	n := pl.yaml
	var written []string
	for _, seg := range path {
		var next *yaml.Node
		switch {
		case n == nil:
		case n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg {
					written, next, line = append(written, seg), n.Content[i+1], n.Content[i].Line
					break
				}
			}
		case n.Kind == yaml.SequenceNode:
			if i, err := strconv.Atoi(seg); err == nil && i < len(n.Content) {
				written, next, line = append(written, seg), n.Content[i], n.Content[i].Line
			}
		}
		if next == nil {
			return strings.Join(written, "."), line
		}
		n = next
	}
	if rel, l := decodeerr.BlameYAML(n, err.Error()); l > 0 {
		return strings.Join(append(written, rel...), "."), l
	}
	return strings.Join(written, "."), line
}
