package check

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider/kv"
)

// KV store dumps: the pairs a KV provider would read, built with kv.Build.
//
//   - `consul kv export [prefix]`: a JSON list of {"key", "flags", "value"}
//     with the values in base64;
//   - plain lines, `key value` (the key, blanks, the value as written up to
//     the end of the line; blank lines and lines starting with # skipped).
//
// The resources are qualified with the store's provider name: @consul for an
// export, Options.KVProvider (default "kv") for lines. One dump per store.

// DefaultKVProvider names the store of a dump of plain lines when
// Options.KVProvider does not.
const DefaultKVProvider = "kv"

// kvDump is one dump's pairs and where they were read.
type kvDump struct {
	provider string
	pairs    []kv.Pair
	origin   origin
}

// kvSourceID is the source ID of a store's dump in c.inputs.
func kvSourceID(prov string) string { return "kv:" + prov }

// isKVExport reports whether a JSON document is a `consul kv export`: a
// list whose first element is an object with a "key".
func isKVExport(doc *yaml.Node) bool {
	root := docRoot(doc)
	return root != nil && root.Kind == yaml.SequenceNode && len(root.Content) > 0 && mapGet(root.Content[0], "key") != nil
}

// isKVLines reports whether content is a dump of `key value` lines: its
// first line that is not blank or a comment starts with a key that has a
// "/" and no "=" (a label file's lines are key=value).
func isKVLines(content string) bool {
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key := strings.FieldsFunc(line, unicode.IsSpace)[0]
		return strings.Contains(key, "/") && !strings.Contains(key, "=")
	}
	return false
}

// kvExport reads a `consul kv export` dump.
func (c *checker) kvExport(path string, doc *yaml.Node) {
	var ls []labelLine
	var pairs []kv.Pair
	for _, e := range docRoot(doc).Content {
		key := scalar(mapGet(e, "key"))
		if key == "" {
			c.add(Problem{File: path, Line: e.Line, Severity: SeverityError, DisablesRouter: true, Message: `an entry without "key"`})
			continue
		}
		raw := scalar(mapGet(e, "value"))
		val, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			c.add(Problem{File: path, Line: e.Line, Key: key, Severity: SeverityError, DisablesRouter: true,
				Message: fmt.Sprintf("value %q is not base64 (consul kv export writes values in base64): %v", raw, err)})
			continue
		}
		ls = append(ls, labelLine{key: key, value: string(val), line: e.Line})
		pairs = append(pairs, kv.Pair{Key: key, Value: string(val)})
	}
	c.addKV(path, "consul", ls, pairs)
}

// kvLines reads a dump of `key value` lines.
func (c *checker) kvLines(path, content string) {
	var ls []labelLine
	var pairs []kv.Pair
	for i, line := range strings.Split(content, "\n") {
		line = strings.TrimRight(line, "\r")
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		line = strings.TrimLeftFunc(line, unicode.IsSpace)
		key, val := line, ""
		if j := strings.IndexFunc(line, unicode.IsSpace); j >= 0 {
			key, val = line[:j], strings.TrimLeftFunc(line[j:], unicode.IsSpace)
		}
		ls = append(ls, labelLine{key: key, value: val, line: i + 1})
		pairs = append(pairs, kv.Pair{Key: key, Value: val})
	}
	prov := c.opts.KVProvider
	if prov == "" {
		prov = DefaultKVProvider
	}
	c.addKV(path, prov, ls, pairs)
}

// addKV records one store's dump.
func (c *checker) addKV(path, prov string, ls []labelLine, pairs []kv.Pair) {
	for _, d := range c.kvDumps {
		if d.provider == prov {
			c.add(Problem{File: path, Severity: SeverityError, DisablesRouter: true,
				Message: fmt.Sprintf("a second dump of the store @%s (the first is %s): not read (one dump per store; --kvProvider names the store of a dump of lines)", prov, d.origin.file)})
			return
		}
	}
	o := origin{file: path, fileIdx: c.files, labels: ls, isKV: true}
	if len(ls) > 0 {
		o.line = ls[0].line
	}
	c.inputs[kvSourceID(prov)] = o
	c.kvDumps = append(c.kvDumps, kvDump{provider: prov, pairs: pairs, origin: o})
}

// buildKV builds every dump with the KV providers' own Build.
func (c *checker) buildKV(configs map[string]*config.Dynamic) {
	for _, d := range c.kvDumps {
		res := kv.Build(d.pairs, kv.Options{RootKey: c.opts.RootKey, SourceID: kvSourceID(d.provider)})
		configs[d.provider], c.definedBy[d.provider] = res.Configuration, res.DefinedBy
		for _, p := range res.Problems {
			c.buildProblem(d.provider, "store", p)
		}
	}
}

// locateKV fills p's Key and Line for field (dotted as the compiler names
// it, "loadBalancer.servers[0]"; may be empty) of the resource kind/name
// from a dump: the key of that field, else the resource's first key.
func (c *checker) locateKV(p *Problem, o origin, kind, name, field string) {
	root := strings.TrimRight(c.opts.RootKey, "/")
	if root == "" {
		root = kv.DefaultRootKey
	}
	base := strings.ToLower(root + "/tcp/" + kind + "/" + name)
	want := base
	if field != "" {
		f := strings.NewReplacer("[", "/", "]", "", ".", "/").Replace(field)
		want = base + "/" + strings.ToLower(f)
	}
	var first *labelLine
	for i := range o.labels {
		l := &o.labels[i]
		k := strings.ToLower(l.key)
		if k == want || strings.HasPrefix(k, want+"/") {
			p.Key, p.Line = l.key, l.line
			return
		}
		if first == nil && strings.HasPrefix(k, base+"/") {
			first = l
		}
	}
	if first != nil {
		p.Key, p.Line = first.key, first.line
	}
}
