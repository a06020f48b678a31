package check

import (
	"regexp"
	"strings"
)

// tomlKey is where a TOML key or table header is written.
type tomlKey struct {
	written string // dotted path as written
	line    int
	value   string // the raw value after "=", for keys
}

// tomlIndex maps lower-cased dotted paths (header path + key) to where they
// are written. It is a line scanner, not a parser: the file has already
// been decoded by the file provider's decoder, this only finds lines for
// problems, so a construct it does not follow costs a line number, nothing
// else.
type tomlIndex map[string]tomlKey

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

func indexTOML(content string) tomlIndex {
	idx := tomlIndex{}
	var table []string
	add := func(path []string, line int, value string) {
		k := strings.ToLower(strings.Join(path, "."))
		if _, ok := idx[k]; !ok {
			idx[k] = tomlKey{written: strings.Join(path, "."), line: line, value: value}
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

// find returns the longest prefix of path (at least min segments) written
// in the file.
func (idx tomlIndex) find(path []string, min int) (tomlKey, bool) {
	for i := len(path); i >= min && i > 0; i-- {
		if k, ok := idx[strings.ToLower(strings.Join(path[:i], "."))]; ok {
			return k, true
		}
	}
	return tomlKey{}, false
}

// blame finds the key a decode error is about, as blame does for YAML.
func (idx tomlIndex) blame(msg string) (tomlKey, bool) {
	var best tomlKey
	found := false
	consider := func(k tomlKey) {
		if !found || k.line < best.line {
			best, found = k, true
		}
	}
	if m := reNode.FindStringSubmatch(msg); m != nil {
		for _, k := range idx {
			if p := splitTOMLPath(k.written); strings.EqualFold(p[len(p)-1], m[1]) {
				consider(k)
			}
		}
	} else if m := reStandalone.FindStringSubmatch(msg); m != nil {
		for _, k := range idx {
			if p := splitTOMLPath(k.written); strings.EqualFold(p[len(p)-1], m[1]) {
				consider(k)
			}
		}
	} else if m := reParsing.FindStringSubmatch(msg); m != nil {
		for _, k := range idx {
			v := strings.Trim(k.value, `"'`)
			if k.value != "" && v == m[1] {
				consider(k)
			}
		}
	}
	return best, found
}
