// Package decodeerr says what a paerser decode error is about, for every
// reader of configuration that reports one: the static configuration's
// loaders (internal/cmdline), the file provider at run time, labels and tags
// (labels), and `tollgate check`.
//
// paerser's errors name neither the file line nor, for a value it cannot
// parse, the key: "field not found, node: adress", `strconv.ParseInt:
// parsing "ten": invalid syntax`. This package finds the key such an error
// is about in a YAML or TOML file (Blame, and the TOML index that `tollgate
// check` also uses to place other problems), and says in words what a value
// should have been (Value: `amount must be an integer, got "ten"`).
package decodeerr

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/internal/quote"
)

var (
	reNode       = regexp.MustCompile(`node: (\S+)`)
	reStandalone = regexp.MustCompile(`(\S+) cannot be a standalone element`)
	reParsing    = regexp.MustCompile(`parsing "((?:[^"\\]|\\.)*)"`)
	reNumError   = regexp.MustCompile(`strconv\.(\w+): parsing "((?:[^"\\]|\\.)*)": (.*)$`)
	reDuration   = regexp.MustCompile(`time: .*"((?:[^"\\]|\\.)*)"$`)
)

// UnknownField returns the key a "field not found, node: <key>" error names.
func UnknownField(err error) (string, bool) {
	if err == nil || !strings.Contains(err.Error(), "field not found") {
		return "", false
	}
	if m := reNode.FindStringSubmatch(err.Error()); m != nil {
		return m[1], true
	}
	return "", false
}

// Value rewords the error paerser returns for a value it could not parse
// (strconv's and time's words) as what field expects, naming the value:
// `amount must be an integer, got "ten"`, `graceTimeOut must be a duration
// such as 10s or 1m30s (a bare number is seconds), got "ten"`; with field
// empty, `must be an integer, got "ten"`. ok is false for any other error.
func Value(field string, err error) (msg string, ok bool) {
	if err == nil {
		return "", false
	}
	subject := "" // with no field: "must be an integer, got ..."
	if field != "" {
		subject = field + " "
	}
	var fn, num string
	var syntax bool
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		fn, num, syntax = ne.Func, ne.Num, errors.Is(ne.Err, strconv.ErrSyntax)
	} else if m := reNumError.FindStringSubmatch(err.Error()); m != nil {
		fn, syntax = m[1], m[3] == strconv.ErrSyntax.Error()
		num, _ = strconv.Unquote(`"` + m[2] + `"`)
	} else if m := reDuration.FindStringSubmatch(err.Error()); m != nil && strings.HasPrefix(err.Error(), "time: ") {
		v, _ := strconv.Unquote(`"` + m[1] + `"`)
		return fmt.Sprintf("%smust be a duration such as 10s or 1m30s (a bare number is seconds), got %s", subject, quote.Q(v)), true
	} else {
		return "", false
	}
	if !syntax {
		return fmt.Sprintf("%sis out of range, got %s", subject, quote.Q(num)), true
	}
	switch fn {
	case "ParseInt", "Atoi":
		return fmt.Sprintf("%smust be an integer, got %s", subject, quote.Q(num)), true
	case "ParseUint":
		return fmt.Sprintf("%smust be an integer from 0 up, got %s", subject, quote.Q(num)), true
	case "ParseBool":
		return fmt.Sprintf("%smust be true or false, got %s", subject, quote.Q(num)), true
	case "ParseFloat":
		return fmt.Sprintf("%smust be a number, got %s", subject, quote.Q(num)), true
	}
	return "", false
}

// Last returns the last segment of a dotted key ("amount" for
// "tcp.middlewares.m.inFlightConn.amount"): the field Value names.
func Last(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// Blame returns where in a YAML (.yml, .yaml, .json) or TOML (.toml) file's
// content the decode error err is: the dotted key path as written and its
// 1-based line; line is 0 when it cannot be placed. It finds the key the
// error names ("field not found, node: rulez", "inFlightConn cannot be a
// standalone element") or the key whose value failed to parse, the first
// in the file when several match.
func Blame(content, ext string, err error) (key string, line int) {
	if err == nil {
		return "", 0
	}
	switch strings.ToLower(ext) {
	case ".toml":
		if k, ok := IndexTOML(content).Blame(err.Error()); ok {
			return k.Written, k.Line
		}
	case ".yml", ".yaml", ".json":
		var doc yaml.Node
		if yaml.Unmarshal([]byte(content), &doc) != nil {
			return "", 0
		}
		if path, line := BlameYAML(&doc, err.Error()); line > 0 {
			return strings.Join(path, "."), line
		}
	}
	return "", 0
}

// Find returns where the key path (case-insensitive segments) is written
// in a YAML or TOML file's content: as much of it as is written, dotted as
// written, and the line of its last segment found; line is 0 when not even
// the first segment is there.
func Find(content, ext string, path []string) (written string, line int) {
	switch strings.ToLower(ext) {
	case ".toml":
		if k, ok := IndexTOML(content).Find(path, 1); ok {
			return k.Written, k.Line
		}
	case ".yml", ".yaml", ".json":
		var doc yaml.Node
		if yaml.Unmarshal([]byte(content), &doc) != nil {
			return "", 0
		}
		n := docRoot(&doc)
		var keys []string
		for _, seg := range path {
			if n == nil || n.Kind != yaml.MappingNode {
				break
			}
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if strings.EqualFold(n.Content[i].Value, seg) {
					keys, line, next = append(keys, n.Content[i].Value), n.Content[i].Line, n.Content[i+1]
					break
				}
			}
			if next == nil {
				break
			}
			n = next
		}
		return strings.Join(keys, "."), line
	}
	return "", 0
}

func docRoot(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return n.Content[0]
	}
	return n
}

// BlameYAML finds the key a decode error message is about in a YAML tree (a
// document node or its root), as Blame does; it returns the key path as
// written and its line.
func BlameYAML(root *yaml.Node, msg string) ([]string, int) {
	root = docRoot(root)
	var keyName, value string
	if m := reNode.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	} else if m := reStandalone.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	} else if m := reParsing.FindStringSubmatch(msg); m != nil {
		value, _ = strconv.Unquote(`"` + m[1] + `"`)
	} else if m := reDuration.FindStringSubmatch(msg); m != nil {
		value, _ = strconv.Unquote(`"` + m[1] + `"`)
	} else {
		return nil, 0
	}
	var hits [][]string
	var lines []int
	var walk func(n *yaml.Node, path []string)
	walk = func(n *yaml.Node, path []string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := append(append([]string(nil), path...), k.Value)
				if keyName != "" && strings.EqualFold(k.Value, keyName) {
					hits, lines = append(hits, p), append(lines, k.Line)
				}
				if keyName == "" && v.Kind == yaml.ScalarNode && v.Value == value {
					hits, lines = append(hits, p), append(lines, k.Line)
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				p := append(append([]string(nil), path...), strconv.Itoa(i))
				if keyName == "" && e.Kind == yaml.ScalarNode && e.Value == value {
					hits, lines = append(hits, p), append(lines, e.Line)
				}
				walk(e, p)
			}
		}
	}
	if root != nil {
		walk(root, nil)
	}
	if len(hits) == 0 {
		return nil, 0
	}
	return hits[0], lines[0] // the first in document order
}

// TOMLKey is where a TOML key or table header is written.
type TOMLKey struct {
	Written string // dotted path as written
	Line    int
	Value   string // the raw value after "=", for keys
}

// TOMLIndex maps lower-cased dotted paths (header path + key) to where they
// are written. It is a line scanner, not a parser: the file is decoded by
// paerser, this only finds lines for errors and problems, so a construct it
// does not follow costs a line number, nothing else.
type TOMLIndex map[string]TOMLKey

var (
	reTOMLHeader = regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$`)
	reTOMLKey    = regexp.MustCompile(`^\s*([A-Za-z0-9_\-."' ]+?)\s*=\s*(.*)$`)
)

func splitTOMLPath(s string) []string {
	var out []string
	for _, seg := range strings.Split(s, ".") {
		seg = strings.TrimSpace(seg)
		seg = strings.Trim(seg, `"'`)
		out = append(out, seg)
	}
	return out
}

// IndexTOML indexes the keys and table headers of TOML content.
func IndexTOML(content string) TOMLIndex {
	idx := TOMLIndex{}
	var table []string
	add := func(path []string, line int, value string) {
		k := strings.ToLower(strings.Join(path, "."))
		if _, ok := idx[k]; !ok {
			idx[k] = TOMLKey{Written: strings.Join(path, "."), Line: line, Value: value}
		}
	}
	for i, line := range strings.Split(content, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if m := reTOMLHeader.FindStringSubmatch(line); m != nil {
			table = splitTOMLPath(m[1])
			for j := 1; j <= len(table); j++ {
				add(table[:j], i+1, "")
			}
			continue
		}
		if m := reTOMLKey.FindStringSubmatch(line); m != nil {
			path := append(append([]string(nil), table...), splitTOMLPath(m[1])...)
			add(path, i+1, strings.TrimSpace(m[2]))
		}
	}
	return idx
}

// Find returns the longest prefix of path (at least min segments) written
// in the file.
func (idx TOMLIndex) Find(path []string, min int) (TOMLKey, bool) {
	for i := len(path); i >= min && i > 0; i-- {
		if k, ok := idx[strings.ToLower(strings.Join(path[:i], "."))]; ok {
			return k, true
		}
	}
	return TOMLKey{}, false
}

// Blame finds the key a decode error message is about, as BlameYAML does
// for YAML.
func (idx TOMLIndex) Blame(msg string) (TOMLKey, bool) {
	var best TOMLKey
	found := false
	consider := func(k TOMLKey) {
		if !found || k.Line < best.Line {
			best, found = k, true
		}
	}
	keyName := ""
	if m := reNode.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	} else if m := reStandalone.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	}
	value, byValue := "", false
	if keyName == "" {
		if m := reParsing.FindStringSubmatch(msg); m != nil {
			value, byValue = m[1], true
		} else if m := reDuration.FindStringSubmatch(msg); m != nil {
			value, byValue = m[1], true
		}
	}
	for _, k := range idx {
		switch {
		case keyName != "":
			if p := splitTOMLPath(k.Written); strings.EqualFold(p[len(p)-1], keyName) {
				consider(k)
			}
		case byValue:
			if v := strings.Trim(k.Value, `"'`); k.Value != "" && v == value {
				consider(k)
			}
		}
	}
	return best, found
}
