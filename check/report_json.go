package check

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
)

// writeReport writes rep as a json.Encoder with SetIndent("", "  ") and
// SetEscapeHTML(false) writes it, byte for byte, but streaming: the
// report's structs and maps, down to the resources, are written one entry
// at a time instead of the whole report encoded into one buffer and then
// indented into another (for 100,000 routers, a third of tollgate check's
// time and hundreds of MB). TestWriteReportMatchesEncoder holds the two to
// the same bytes.
func writeReport(w io.Writer, rep *Report) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	s := &streamer{w: bw, leaves: map[string]*leafEncoder{}}
	if err := s.value(reflect.ValueOf(rep), "", 0); err != nil {
		return err
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

const indent = "  "

// streamDepth is how deep structs and maps are walked; below, each value
// is encoded whole (a router, a service).
const streamDepth = 3

type streamer struct {
	w      *bufio.Writer
	leaves map[string]*leafEncoder // by prefix
}

type leafEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// leaf writes v encoded whole, at the indentation prefix.
func (s *streamer) leaf(v reflect.Value, prefix string) error {
	l := s.leaves[prefix]
	if l == nil {
		l = &leafEncoder{}
		l.enc = json.NewEncoder(&l.buf)
		l.enc.SetIndent(prefix, indent)
		l.enc.SetEscapeHTML(false)
		s.leaves[prefix] = l
	}
	l.buf.Reset()
	var x any
	if v.IsValid() {
		x = v.Interface()
	}
	if err := l.enc.Encode(x); err != nil {
		return err
	}
	b := l.buf.Bytes()
	b = b[:len(b)-1] // without Encode's newline
	if s.w.Available() < len(b) {
		// One Write for the whole value, whatever its size: Run's
		// config.RedactingWriter finds a private key only within one.
		if err := s.w.Flush(); err != nil {
			return err
		}
	}
	_, err := s.w.Write(b)
	return err
}

var (
	marshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// walkable reports whether t is encoded by encoding/json as a plain object
// that value can write itself: a struct without custom marshalling or
// embedded fields, or a map with string keys.
func walkable(t reflect.Type) bool {
	if t.Implements(marshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(marshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Key().Kind() == reflect.String && t.Key() == reflect.TypeFor[string]()
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				return false
			}
			if !f.IsExported() {
				continue
			}
			_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if opts != "" && opts != "omitempty" {
				return false
			}
		}
		return true
	}
	return false
}

// value writes v at the indentation prefix.
func (s *streamer) value(v reflect.Value, prefix string, depth int) error {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() || depth >= streamDepth || !walkable(v.Type().Elem()) || v.Type().Implements(marshaler) || v.Type().Implements(textMarshaler) {
			return s.leaf(v, prefix)
		}
		v = v.Elem()
	}
	if depth >= streamDepth || !walkable(v.Type()) {
		return s.leaf(v, prefix)
	}
	inner := prefix + indent
	n := 0
	entry := func(key string) error {
		if n == 0 {
			s.w.WriteString("{\n")
		} else {
			s.w.WriteString(",\n")
		}
		n++
		s.w.WriteString(inner)
		if err := s.leaf(reflect.ValueOf(key), inner); err != nil {
			return err
		}
		s.w.WriteString(": ")
		return nil
	}
	switch v.Kind() {
	case reflect.Map:
		if v.IsNil() {
			s.w.WriteString("null")
			return nil
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := entry(k); err != nil {
				return err
			}
			if err := s.value(v.MapIndex(reflect.ValueOf(k)), inner, depth+1); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if opts == "omitempty" && isEmpty(fv) {
				continue
			}
			if err := entry(name); err != nil {
				return err
			}
			if err := s.value(fv, inner, depth+1); err != nil {
				return err
			}
		}
	}
	if n == 0 {
		s.w.WriteString("{}")
		return nil
	}
	s.w.WriteString("\n" + prefix + "}")
	return nil
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
