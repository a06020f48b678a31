package file

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	ptypes "github.com/traefik/paerser/types"

	"github.com/tollgate-proxy/tollgate/config"
)

// The fast path of a YAML dynamic file (docs/performance.md, "Large
// configurations"). paerser decodes a file YAML -> map -> node tree ->
// struct, and yaml.v3 checks each mapping's keys for duplicates pairwise:
// 100,000 routers took minutes and gigabytes. decodeYAMLFast reads the
// block subset of YAML that such files are written in (block mappings and
// sequences, plain and quoted one-line scalars, flow sequences of scalars,
// comments) straight into the configuration's structs, with paerser's
// meaning for every key and value: field names matched regardless of case,
// each YAML scalar turned into the text paerser's decoder would see and
// that text converted as paerser's filler converts it. Whatever it does not
// read exactly so (anchors, tags, multi-line or escaped scalars, flow
// mappings, empty values, duplicate keys, a key that is not a field, a
// value that does not convert, non-ASCII text...) makes it give up, and the
// file is decoded by paerser, which also words every error. So each input
// has one meaning, whichever path reads it: TestFastYAMLMatchesPaerser and
// FuzzFastYAML hold the two to the same result.

// errSlow is the panic value that abandons the fast path.
type errSlow struct{}

func slow() { panic(errSlow{}) }

// decodeYAMLFast decodes content into a new configuration, or reports
// false when content is outside what it reads exactly.
func decodeYAMLFast(content string) (d *config.Dynamic, ok bool) {
	d = &config.Dynamic{}
	ok = readDocument(content, func(p *yparser) target {
		return &rootTarget{p: p, v: reflect.ValueOf(d).Elem(), keys: map[string]bool{}}
	})
	if !ok {
		return nil, false
	}
	return d, true // with nothing in it for a document of comments only, as paerser
}

// readDocument reads content, a document of the block subset, into the
// target root makes for its top-level mapping; it reports false when
// content is outside the subset or the target gave up (slow), and true for
// a document of comments only, the target not made.
func readDocument(content string, root func(*yparser) target) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			// errSlow, or a bug here: either way paerser decides, and a
			// bad file must not take tollgate down.
			ok = false
		}
	}()
	if !plainASCII(content) {
		return false
	}
	p := &yparser{s: content}
	p.next()
	if !p.eof && p.indent == 0 && p.text == "---" { // indented, it is no marker: yaml.v3 refuses it
		p.next()
	}
	if p.eof {
		return true
	}
	if p.indent != 0 {
		return false
	}
	p.mapping(0, root(p))
	return p.eof // else "...", "---" or a stray line
}

// plainASCII reports whether s has only printable ASCII, spaces, newlines
// and CRLF line ends: tabs, other control characters and anything non-ASCII
// (whose case folding paerser's field match would see) take the slow path.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f, c == '\n':
		case c == '\r' && i+1 < len(s) && s[i+1] == '\n':
		default:
			return false
		}
	}
	return true
}

// yparser walks content line by line; the current content line (not blank,
// not a comment) is text, at indent.
type yparser struct {
	s      string
	pos    int // start of the line after the current one
	line   int // of the current line, 1-based
	indent int
	text   string // the current line without its indentation and line end
	eof    bool
	skip   *skipValue   // skipper's
	free   []*skipValue // skipValue's mappings, for reuse
}

// next moves to the next content line.
func (p *yparser) next() {
	for p.pos < len(p.s) {
		end := strings.IndexByte(p.s[p.pos:], '\n')
		var line string
		if end < 0 {
			line, p.pos = p.s[p.pos:], len(p.s)
		} else {
			line, p.pos = p.s[p.pos:p.pos+end], p.pos+end+1
		}
		p.line++
		line = strings.TrimSuffix(line, "\r")
		n := 0
		for n < len(line) && line[n] == ' ' {
			n++
		}
		rest := strings.TrimRight(line[n:], " ")
		if rest == "" || rest[0] == '#' {
			continue
		}
		p.indent, p.text = n, rest
		return
	}
	p.eof, p.text, p.indent = true, "", -1
}

// target receives a mapping's entries.
type target interface {
	// entry returns where the value of key goes; kinds outside the fast
	// path give up (slow).
	entry(key string) value
	// done is called once the mapping ends.
	done()
}

// value is where one YAML value goes.
type value interface {
	scalar(s string, kind scalarKind)
	seq() seqTarget
	mapping() target
}

type seqTarget interface {
	item() value
	done()
}

// mapping reads the block mapping at indent n into t.
func (p *yparser) mapping(n int, t target) {
	for !p.eof && p.indent == n {
		if strings.HasPrefix(p.text, "- ") || p.text == "-" {
			slow() // a sequence where a key was expected
		}
		key, rest := splitKey(p.text)
		p.value(n, t.entry(key), rest)
	}
	if !p.eof && p.indent > n {
		slow()
	}
	t.done()
}

// value reads what follows a key of the mapping at indent n (rest, on the
// key's line, else the lines below) into v.
func (p *yparser) value(n int, v value, rest string) {
	if rest != "" {
		p.inline(v, rest)
		p.next()
		if !p.eof && p.indent > n {
			slow() // a multi-line scalar, or a mistake paerser will word
		}
		return
	}
	p.next()
	switch {
	case p.eof || p.indent < n:
		slow() // an empty value
	case isItem(p.text) && p.indent >= n:
		p.sequence(p.indent, v.seq())
	case p.indent > n:
		p.mapping(p.indent, v.mapping())
	default:
		slow() // an empty value
	}
}

func isItem(text string) bool { return strings.HasPrefix(text, "- ") || text == "-" }

// sequence reads the block sequence at indent m into t.
func (p *yparser) sequence(m int, t seqTarget) {
	for !p.eof && p.indent == m && isItem(p.text) {
		rest := strings.TrimLeft(p.text[1:], " ")
		if rest == "" || isItem(rest) {
			slow() // an item below its dash, or a sequence in a sequence
		}
		v := t.item()
		if keyLike(rest) {
			// A compact mapping: its first entry on the dash's line, the
			// others below at the column of its first key.
			col := m + (len(p.text) - len(rest))
			key, after := splitKey(rest)
			mt := v.mapping()
			p.indent, p.text = col, rest
			_ = key
			p.mappingFrom(col, mt, key, after)
			continue
		}
		p.inline(v, rest)
		p.next()
		if !p.eof && p.indent > m {
			slow()
		}
	}
	if !p.eof && p.indent > m {
		slow()
	}
	t.done()
}

// mappingFrom is mapping, its first key already split off the current line.
func (p *yparser) mappingFrom(n int, t target, key, rest string) {
	p.value(n, t.entry(key), rest)
	for !p.eof && p.indent == n {
		if isItem(p.text) {
			slow()
		}
		k, r := splitKey(p.text)
		p.value(n, t.entry(k), r)
	}
	if !p.eof && p.indent > n {
		slow()
	}
	t.done()
}

// keyLike reports whether text starts with a mapping key (a quoted key, or
// a plain one followed by ": " or a final ":").
func keyLike(text string) bool {
	switch text[0] {
	case '"', '\'':
		defer func() { _ = recover() }() // not a quoted scalar: not a key
		_, after := quoted(text)
		return strings.HasPrefix(after, ":")
	case '[', '{':
		return false
	}
	return strings.Contains(text, ": ") || strings.HasSuffix(text, ":")
}

// splitKey splits "key: rest" (rest without its comment); the key must be
// a string in YAML's eyes.
func splitKey(text string) (key, rest string) {
	var after string
	switch text[0] {
	case '"', '\'':
		key, after = quoted(text)
		if !strings.HasPrefix(after, ":") {
			slow()
		}
		after = after[1:]
	default:
		i := strings.Index(text, ": ")
		if i < 0 {
			if !strings.HasSuffix(text, ":") {
				slow()
			}
			i = len(text) - 1
		}
		key, after = text[:i], text[i+1:]
		if k, kind := plainScalar(key); kind != kindString || k != key || !plainStart(key) || strings.Contains(key, " #") || key[len(key)-1] == ' ' {
			slow()
		}
	}
	if key == "" || key == "<<" || len(text)-len(after) > 1000 {
		slow() // YAML's implicit keys end within 1024 characters
	}
	if after != "" && after[0] != ' ' {
		slow()
	}
	after = strings.TrimLeft(after, " ")
	if strings.HasPrefix(after, "#") {
		after = ""
	}
	return key, after
}

// plainStart reports whether a plain scalar may start as s does (YAML's
// indicators otherwise).
func plainStart(s string) bool {
	if strings.HasPrefix(s, "---") || strings.HasPrefix(s, "...") {
		return false // maybe a document marker
	}
	switch s[0] {
	case '-', '?', ':':
		return len(s) > 1 && s[1] != ' ' && s[0] == '-'
	case ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	}
	return true
}

// inline reads a value written on its key's (or dash's) line.
func (p *yparser) inline(v value, rest string) {
	switch rest[0] {
	case '"', '\'':
		s, tail := quoted(rest)
		endOfValue(tail)
		v.scalar(s, kindString)
	case '[':
		p.flow(v.seq(), rest)
	default:
		if !plainStart(rest) {
			slow()
		}
		if i := strings.Index(rest, " #"); i >= 0 {
			rest = strings.TrimRight(rest[:i], " ")
		}
		if strings.Contains(rest, ": ") || strings.HasSuffix(rest, ":") {
			slow()
		}
		s, kind := plainScalar(rest)
		v.scalar(s, kind)
	}
}

// endOfValue checks that only a comment follows a quoted scalar.
func endOfValue(tail string) {
	t := strings.TrimLeft(tail, " ")
	if t != "" && (t[0] != '#' || len(t) == len(tail)) {
		slow()
	}
}

// quoted reads the one-line quoted scalar s starts with and returns it and
// what follows it. Of double quotes' escapes, \\ \" \n \r and \t are
// read; the others take the slow path (yaml.v3 refuses \/, which YAML 1.2
// allows, and the fast path must refuse what it refuses).
func quoted(s string) (string, string) {
	if s[0] == '"' {
		var b []byte // nil until an escape
		for i := 1; i < len(s); i++ {
			switch c := s[i]; c {
			case '"':
				if b == nil {
					return s[1:i], s[i+1:]
				}
				return string(b), s[i+1:]
			case '\\':
				if b == nil {
					b = append(b, s[1:i]...)
				}
				if i++; i == len(s) {
					slow()
				}
				switch e := s[i]; e {
				case '\\', '"':
					b = append(b, e)
				case 'n':
					b = append(b, '\n')
				case 'r':
					b = append(b, '\r')
				case 't':
					b = append(b, '\t')
				default:
					slow()
				}
			default:
				if b != nil {
					b = append(b, c)
				}
			}
		}
		slow()
	}
	i := strings.IndexByte(s[1:], '\'') + 1
	if i == 0 {
		slow()
	}
	if i+1 >= len(s) || s[i+1] != '\'' {
		return s[1:i], s[i+1:]
	}
	var b []byte // '' is a quote
	for i = 1; i < len(s); i++ {
		if s[i] != '\'' {
			b = append(b, s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b = append(b, '\'')
			i++
			continue
		}
		return string(b), s[i+1:]
	}
	slow()
	return "", ""
}

// flow reads a one-line flow sequence of scalars ("[a, 'b', \"c\"]").
func (p *yparser) flow(t seqTarget, rest string) {
	s := rest[1:]
	for n := 0; ; n++ {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			slow() // not closed on its line
		}
		if s[0] == ']' && n == 0 {
			slow() // an empty sequence
		}
		switch s[0] {
		case '"', '\'':
			var v string
			v, s = quoted(s)
			t.item().scalar(v, kindString)
			s = strings.TrimLeft(s, " ")
		default:
			end := strings.IndexAny(s, ",]")
			if end < 0 {
				slow()
			}
			item := strings.TrimRight(s[:end], " ")
			if item == "" || strings.ContainsAny(item, "[]{}#:\"'") || !plainStart(item) {
				slow()
			}
			v, kind := plainScalar(item)
			t.item().scalar(v, kind)
			s = s[end:]
		}
		if s == "" {
			slow()
		}
		if s[0] == ']' {
			endOfValue(s[1:])
			t.done()
			return
		}
		if s[0] != ',' {
			slow()
		}
		s = s[1:]
		if strings.TrimLeft(s, " ") != "" && strings.TrimLeft(s, " ")[0] == ']' {
			slow() // a trailing comma
		}
	}
}

type scalarKind int

const (
	kindString scalarKind = iota
	kindInt
	kindBool
)

// yamlFloat is yaml.v3's pattern of a float.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// plainScalar returns the text paerser's decoder sees for a plain scalar
// (yaml.v3 resolves it to a string, an int or a bool, which paerser
// formats back), and its kind; what yaml.v3 reads as null, a float, a
// timestamp or an int not written in plain decimal takes the slow path.
// The cases follow yaml.v3's resolve.
func plainScalar(s string) (string, scalarKind) {
	switch s[0] {
	case 'y', 'Y', 'n', 'N', 't', 'T', 'f', 'F', 'o', 'O', '~':
		switch s {
		case "true", "True", "TRUE":
			return "true", kindBool
		case "false", "False", "FALSE":
			return "false", kindBool
		case "~", "null", "Null", "NULL":
			slow()
		}
		return s, kindString
	case '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			slow()
		}
		return s, kindString
	case '+', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		return s, kindString
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits == 4 && len(s) > 4 && s[4] == '-' {
		slow() // maybe a timestamp
	}
	plain := strings.ReplaceAll(s, "_", "")
	if v, err := strconv.ParseInt(plain, 0, 64); err == nil {
		if strconv.FormatInt(v, 10) != s {
			slow()
		}
		return s, kindInt
	}
	if v, err := strconv.ParseUint(plain, 0, 64); err == nil {
		if strconv.FormatUint(v, 10) != s {
			slow()
		}
		return s, kindInt
	}
	if yamlFloat.MatchString(plain) {
		slow()
	}
	for _, pre := range []string{"0b", "-0b", "0o", "-0o"} {
		if strings.HasPrefix(plain, pre) {
			slow()
		}
	}
	return s, kindString
}

// Targets: reflect.Values filled as paerser's filler fills them.

// rootTarget is the file's top level: keys that are not a field of
// config.Dynamic are left out, as paerser's root filter does.
type rootTarget struct {
	p      *yparser
	v      reflect.Value
	keys   map[string]bool // as written: twice is yaml.v3's error
	fields uint64
	fv     reflValue // the value entry returns (valueSlot)
}

func (r *rootTarget) entry(key string) value {
	if r.keys[key] {
		slow()
	}
	r.keys[key] = true
	info := structOf(r.v.Type())
	f, ok := info.field(key)
	if !ok {
		return r.p.skipper()
	}
	if f >= 64 || r.fields&(1<<f) != 0 {
		slow()
	}
	r.fields |= 1 << f
	return fieldValue(&r.fv, r.v, info, f)
}

func (*rootTarget) done() {}

// structTarget fills a struct's fields; a field given twice (in any case)
// takes the slow path.
type structTarget struct {
	v    reflect.Value
	info *structInfo
	seen uint64
	fv   reflValue // the value entry returns (valueSlot)
}

// valueSlot: a target's entry (a sequence's item) returns a pointer to a
// value the target holds, overwritten by the next entry, rather than a
// value of its own: the parser is done with one entry's value before it
// asks for the next, and a value boxed per field was a fifth of what
// reading 100,000 routers allocated. Targets are pooled the same way once
// done (targetPool).

// targetPool holds structTargets whose mapping has ended.
var targetPool = sync.Pool{New: func() any { return new(structTarget) }}

// newStructTarget returns a pooled structTarget for v.
func newStructTarget(v reflect.Value) *structTarget {
	t := targetPool.Get().(*structTarget)
	t.v, t.info, t.seen = v, structOf(v.Type()), 0
	return t
}

func (t *structTarget) entry(key string) value {
	f, ok := t.info.field(key)
	if !ok {
		slow() // unknown: paerser words the error
	}
	if f >= 64 || t.seen&(1<<f) != 0 {
		slow()
	}
	t.seen |= 1 << f
	return fieldValue(&t.fv, t.v, t.info, f)
}

// done returns the target to targetPool: the parser does not use it, or
// the value of its last entry, once its mapping has ended.
func (t *structTarget) done() {
	*t = structTarget{}
	targetPool.Put(t)
}

// fieldValue sets slot to field f of v and returns it.
func fieldValue(slot *reflValue, v reflect.Value, info *structInfo, f int) value {
	if info.fields[f].disabled {
		slow()
	}
	*slot = reflValue{v: v.Field(f)}
	return slot
}

// reflValue is one settable value of the configuration.
type reflValue struct{ v reflect.Value }

func (r reflValue) scalar(s string, kind scalarKind) {
	v := r.v
	if v.Kind() == reflect.Pointer {
		if v.Type().Elem().Kind() == reflect.Struct || !v.IsNil() {
			slow() // allowEmpty sections and the like
		}
		v.Set(reflect.New(v.Type().Elem()))
		v = v.Elem()
	}
	setScalar(v, s)
}

// setScalar converts s as paerser's filler does.
func setScalar(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		// A copy: a substring would keep the whole file's text alive as
		// long as the configuration (27 MB for 100,000 routers).
		v.SetString(strings.Clone(s))
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			slow()
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		switch v.Type() {
		case reflect.TypeFor[ptypes.Duration](), reflect.TypeFor[time.Duration]():
			unit := time.Second
			if v.Type() == reflect.TypeFor[time.Duration]() {
				unit = time.Nanosecond
			}
			if n, err := strconv.ParseInt(s, 10, bits); err == nil {
				v.SetInt(int64(time.Duration(n) * unit))
				return
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				slow()
			}
			v.SetInt(int64(d))
		default:
			n, err := strconv.ParseInt(s, 10, bits)
			if err != nil {
				slow()
			}
			v.SetInt(n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			slow()
		}
		v.SetUint(n)
	default:
		slow()
	}
}

func (r reflValue) seq() seqTarget {
	v := r.v
	if v.Kind() != reflect.Slice || !v.IsNil() {
		slow()
	}
	switch e := v.Type().Elem(); e.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		q := seqPool.Get().(*scalarSeq)
		q.v = v
		return q
	case reflect.Struct:
		return &structSeq{v: v}
	case reflect.Pointer:
		if e.Elem().Kind() == reflect.Struct {
			return &structSeq{v: v}
		}
	}
	slow()
	return nil
}

func (r reflValue) mapping() target {
	v := r.v
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Struct || !v.IsNil() {
			slow()
		}
		return newStruct(v)
	case reflect.Struct:
		return newStructTarget(v)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String || !v.IsNil() {
			slow()
		}
		e := v.Type().Elem()
		if e.Kind() != reflect.Struct && (e.Kind() != reflect.Pointer || e.Elem().Kind() != reflect.Struct) {
			slow()
		}
		v.Set(reflect.MakeMap(v.Type()))
		return &mapTarget{v: v, elem: e}
	}
	slow()
	return nil
}

// newStruct sets the nil pointer v to a new struct, with its SetDefaults
// applied as paerser applies it, and returns its target.
func newStruct(v reflect.Value) target {
	s := newStructValue(v.Type().Elem())
	v.Set(s.Addr())
	return newStructTarget(s)
}

// mapTarget fills a map of named resources; a name given twice is yaml.v3's
// error, on the slow path.
type mapTarget struct {
	v    reflect.Value
	elem reflect.Type
	e    mapEntry // the value entry returns (valueSlot)
}

func (m *mapTarget) entry(key string) value {
	k := reflect.ValueOf(strings.Clone(key))
	if m.v.MapIndex(k).IsValid() {
		slow()
	}
	m.e = mapEntry{m: m, key: k}
	return &m.e
}

func (m *mapTarget) done() {}

// mapEntry is a map's value: a struct, or a pointer to one, set into the
// map once it is made.
type mapEntry struct {
	m   *mapTarget
	key reflect.Value
}

func (e mapEntry) scalar(string, scalarKind) { slow() }
func (e mapEntry) seq() seqTarget            { slow(); return nil }
func (e mapEntry) mapping() target {
	if e.m.elem.Kind() == reflect.Pointer {
		p := reflect.New(e.m.elem).Elem()
		t := newStruct(p)
		e.m.v.SetMapIndex(e.key, p)
		return t
	}
	return &structValueTarget{structTarget: structTarget{v: newStructValue(e.m.elem), info: structOf(e.m.elem)}, set: func(v reflect.Value) { e.m.v.SetMapIndex(e.key, v) }}
}

// newStructValue returns a new struct of type t, with its SetDefaults
// applied as paerser applies it.
func newStructValue(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if d, ok := p.Interface().(interface{ SetDefaults() }); ok {
		d.SetDefaults()
	}
	return p.Elem()
}

// structValueTarget is a struct stored by value once filled (a map's).
type structValueTarget struct {
	structTarget
	set func(reflect.Value)
}

func (t *structValueTarget) done() { t.set(t.v) }

// scalarSeq fills a slice of scalars: paerser joins the items and splits
// them again, trimming each.
type scalarSeq struct {
	v     reflect.Value
	items []string
	it    seqItem // the value item returns (valueSlot)
}

func (s *scalarSeq) item() value {
	s.it = seqItem{s: s}
	return &s.it
}

func (s *scalarSeq) done() {
	sl := reflect.MakeSlice(s.v.Type(), len(s.items), len(s.items))
	for i, it := range s.items {
		setScalar(sl.Index(i), strings.TrimSpace(it))
	}
	s.v.Set(sl)
	// Pooled, as targets are (valueSlot), with its items' array cleared: the
	// items are substrings of the file's text, and a pooled array holding
	// them would keep the whole text alive until the pool is dropped.
	clear(s.items)
	*s = scalarSeq{items: s.items[:0]}
	seqPool.Put(s)
}

// seqPool holds scalarSeqs whose sequence has ended, with their items'
// array.
var seqPool = sync.Pool{New: func() any { return new(scalarSeq) }}

type seqItem struct{ s *scalarSeq }

func (i *seqItem) scalar(v string, _ scalarKind) {
	if strings.Contains(v, rawSliceSeparator) {
		slow()
	}
	i.s.items = append(i.s.items, v)
}
func (i *seqItem) seq() seqTarget  { slow(); return nil }
func (i *seqItem) mapping() target { slow(); return nil }

// rawSliceSeparator is what paerser joins a slice's items with.
const rawSliceSeparator = "║"

// structSeq fills a slice of structs (or of pointers to them).
type structSeq struct {
	v  reflect.Value
	n  int
	it structItem // the value item returns (valueSlot)
}

func (s *structSeq) item() value {
	s.v.Set(reflect.Append(s.v, reflect.New(s.v.Type().Elem()).Elem()))
	s.n++
	s.it = structItem{s.v.Index(s.n - 1)}
	return &s.it
}

func (s *structSeq) done() {}

type structItem struct{ v reflect.Value }

func (i structItem) scalar(string, scalarKind) { slow() }
func (i structItem) seq() seqTarget            { slow(); return nil }
func (i structItem) mapping() target {
	if i.v.Kind() == reflect.Pointer {
		return newStruct(i.v)
	}
	i.v.Set(newStructValue(i.v.Type()))
	return newStructTarget(i.v)
}

// skipValue reads a section paerser's root filter leaves out (http, udp),
// checking only that yaml.v3 would read it: a key twice in one mapping is
// its error. A parser's skipValues are reused: p.skip for values, p.free
// for mappings (each with its keys).
type skipValue struct {
	p    *yparser
	seen keySet
}

func (p *yparser) skipper() *skipValue {
	if p.skip == nil {
		p.skip = &skipValue{p: p}
	}
	return p.skip
}

func (s *skipValue) scalar(string, scalarKind) {}
func (s *skipValue) seq() seqTarget            { return skipSeq{s.p} }
func (s *skipValue) mapping() target {
	if n := len(s.p.free); n > 0 {
		m := s.p.free[n-1]
		s.p.free = s.p.free[:n-1]
		return m
	}
	return &skipValue{p: s.p}
}
func (s *skipValue) entry(key string) value {
	s.seen.add(key)
	return s.p.skipper()
}
func (s *skipValue) done() {
	s.seen.few, s.seen.many = s.seen.few[:0], nil
	s.p.free = append(s.p.free, s)
}

type skipSeq struct{ p *yparser }

func (q skipSeq) item() value { return q.p.skipper() }
func (skipSeq) done()         {}

// keySet holds the keys of one mapping; one given twice takes the slow
// path (yaml.v3's error).
type keySet struct {
	few  []string
	many map[string]bool
}

func (k *keySet) add(key string) {
	if k.many != nil {
		if k.many[key] {
			slow()
		}
		k.many[key] = true
		return
	}
	for _, f := range k.few {
		if f == key {
			slow()
		}
	}
	k.few = append(k.few, key)
	if len(k.few) > 16 {
		k.many = map[string]bool{}
		for _, f := range k.few {
			k.many[f] = true
		}
	}
}

// TopKey is a key at the top of a YAML document, as written, and its line.
type TopKey struct {
	Written string
	Line    int
}

// TopKeysYAML returns the top-level keys of a YAML document in the block
// style the fast path reads (decodeYAMLFast), reading all of it as yaml.v3
// would, without building it; ok is false for any other document (parse it
// with yaml.v3 then). The keys of a document with none are nil and ok.
func TopKeysYAML(content string) (keys []TopKey, ok bool) {
	var t *topKeys
	if !readDocument(content, func(p *yparser) target { t = &topKeys{p: p}; return t }) {
		return nil, false
	}
	if t == nil {
		return nil, true
	}
	return t.keys, true
}

type topKeys struct {
	p    *yparser
	seen keySet
	keys []TopKey
}

func (t *topKeys) entry(key string) value {
	t.seen.add(key)
	t.keys = append(t.keys, TopKey{Written: key, Line: t.p.line})
	return t.p.skipper()
}

func (*topKeys) done() {}

// structInfo is how paerser matches keys to a struct's fields: by field
// name, regardless of case.
type structInfo struct {
	fields []fieldInfo
	byName map[string]int // lower-case field name -> index
	// unsupported: the struct embeds another, which paerser searches
	// first; the slow path takes such a struct.
	unsupported bool
}

type fieldInfo struct {
	disabled bool // tagged file:"-": paerser ignores it
}

var structInfos sync.Map // reflect.Type -> *structInfo

func structOf(t reflect.Type) *structInfo {
	if v, ok := structInfos.Load(t); ok {
		return v.(*structInfo)
	}
	info := &structInfo{byName: map[string]int{}}
	for i := range t.NumField() {
		f := t.Field(i)
		info.fields = append(info.fields, fieldInfo{disabled: f.Tag.Get("file") == "-"})
		if f.Anonymous {
			info.unsupported = true
		}
		if !f.IsExported() {
			continue
		}
		name := strings.ToLower(f.Name)
		if _, dup := info.byName[name]; !dup {
			info.byName[name] = i
		}
	}
	structInfos.Store(t, info)
	return info
}

// field returns the index of the field key names.
func (s *structInfo) field(key string) (int, bool) {
	if s.unsupported {
		slow()
	}
	var buf [64]byte
	if len(key) > len(buf) {
		return 0, false
	}
	b := buf[:len(key)]
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	i, ok := s.byName[string(b)]
	return i, ok
}
