package file

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"
)

// What one render of a dynamic file may cost (Render). Text/template has no
// hook of its own, so the budget is charged by the functions the template
// calls (each of them wrapped, text/template's print, printf, println, html,
// js and urlquery included) and by hooks Render adds to the parsed template
// (instrument): at the end of every pipeline, before every range, at the
// start of every template, around the arguments of comparisons and methods.
const (
	// maxSteps bounds a render's work: one step per pipeline evaluated
	// (every {{ }} action, if, with, range, template call and parenthesized
	// argument), one per function call, one per element a range goes over
	// (counted when the range starts).
	maxSteps = 1_000_000
	// maxValues bounds the values a render's functions make and read,
	// counted as the bytes of strings and 16 bytes per element of lists and
	// maps (a list or map argument counted with everything in it, as often
	// as it is reached: its size printed).
	maxValues = 64 << 20
	// renderTimeout stops a render that the counts above did not stop (a
	// function that is slow for its size: key generation, a DNS lookup of
	// getHostByName): checked at every step.
	renderTimeout = 10 * time.Second
	// maxDepth bounds how deeply the values a template passes to its
	// functions or prints may be nested: deeper (or a map that holds
	// itself) is an error, not a recursion as deep.
	maxDepth = 1000
)

// elemBytes is what a list or map element counts for, besides what it holds.
const elemBytes = 16

// scalarBytes is what a number, a bool or any other value without parts
// counts for: about the longest it prints as.
const scalarBytes = 8

// BudgetError is a render stopped by its budget: Limit of What.
type BudgetError struct {
	What  string // "steps", "bytes of values", ...
	Limit int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("rendering stopped: more than %d %s", e.Limit, e.What)
}

// budget is what is left to one render.
type budget struct {
	steps    int64
	values   int64
	out      *boundedBuilder
	deadline time.Time
	ctx      context.Context
	err      error // the first budget error: every later charge fails with it
}

// reset makes b the full budget of a render writing to out, until ctx's
// deadline.
func (b *budget) reset(ctx context.Context, out *boundedBuilder) {
	*b = budget{steps: maxSteps, values: maxValues, out: out, ctx: ctx}
	b.deadline, _ = ctx.Deadline()
}

// release drops the render's context and output, so that a pooled
// renderer keeps neither.
func (b *budget) release() { *b = budget{} }

// step charges n steps.
func (b *budget) step(n int64) error {
	if b.err != nil {
		return b.err
	}
	if n > b.steps {
		b.steps = -1
		b.err = &BudgetError{What: "steps (pipelines, function calls, range iterations)", Limit: maxSteps}
		return b.err
	}
	b.steps -= n
	if time.Now().After(b.deadline) {
		b.err = &BudgetError{What: "seconds of rendering", Limit: int64(renderTimeout / time.Second)}
		return b.err
	}
	return nil
}

// charge charges n bytes of values.
func (b *budget) charge(n int64) error {
	if b.err != nil {
		return b.err
	}
	if n > b.values {
		return b.valuesSpent()
	}
	b.values -= n
	return nil
}

// fits reports an error when a function's result could be more than the
// values left (bound: its size at most, computed before it runs).
func (b *budget) fits(bound int64) error {
	if b.err != nil {
		return b.err
	}
	if bound > b.values {
		return b.valuesSpent()
	}
	return nil
}

func (b *budget) valuesSpent() error {
	b.values = -1
	b.err = &BudgetError{What: "bytes of values made or read by its functions", Limit: maxValues}
	return b.err
}

// errTooDeep is a value nested deeper than maxDepth, or one that holds itself.
var errTooDeep = &BudgetError{What: "levels of nesting in one value (or a value that holds itself)", Limit: maxDepth}

// sizeOf is v's size as the budget counts it, with everything it holds, as
// often as it is reached (what printing it would write, within a factor):
// more than limit (or nested over maxDepth) stops the count, and is
// reported as limit+1. depth is v's maximum nesting.
func sizeOf(v reflect.Value, limit int64) (size int64, depth int, err error) {
	var walk func(v reflect.Value, d int) bool
	walk = func(v reflect.Value, d int) bool {
		if d > maxDepth {
			err = errTooDeep
			return false
		}
		depth = max(depth, d)
		for v.IsValid() && v.Kind() == reflect.Interface {
			if v.IsNil() {
				break
			}
			v = v.Elem()
		}
		if !v.IsValid() {
			size += scalarBytes
			return size <= limit
		}
		if v.Type().Implements(stringerType) || v.Type().Implements(errorType) {
			// Printed through its method (time.Time, a semver version).
			size += 8 * scalarBytes
			return size <= limit
		}
		switch v.Kind() {
		case reflect.String:
			size += int64(v.Len())
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				size += int64(v.Len())
				break
			}
			size += elemBytes
			for i := range v.Len() {
				size += elemBytes
				if size > limit || !walk(v.Index(i), d+1) {
					return false
				}
			}
		case reflect.Map:
			size += elemBytes
			it := v.MapRange()
			for it.Next() {
				size += elemBytes
				if size > limit || !walk(it.Key(), d+1) || !walk(it.Value(), d+1) {
					return false
				}
			}
		case reflect.Pointer:
			if v.IsNil() {
				size += scalarBytes
				break
			}
			return walk(v.Elem(), d+1)
		case reflect.Struct:
			size += elemBytes
			for i := range v.NumField() {
				if !walk(v.Field(i), d+1) {
					return false
				}
			}
		default:
			size += scalarBytes
		}
		return size <= limit
	}
	if !walk(v, 0) && err == nil {
		size = limit + 1
	}
	return size, depth, err
}

// shallowSize is what a value a function made counts for: a string's bytes,
// a list's or map's elements (what they hold was counted when it was made).
func shallowSize(v reflect.Value) int64 {
	for v.IsValid() && v.Kind() == reflect.Interface && !v.IsNil() {
		v = v.Elem()
	}
	if !v.IsValid() {
		return 0
	}
	switch v.Kind() {
	case reflect.String:
		return int64(v.Len())
	case reflect.Slice, reflect.Array, reflect.Map:
		if v.Kind() != reflect.Map && v.Type().Elem().Kind() == reflect.Uint8 {
			return int64(v.Len())
		}
		return elemBytes * int64(v.Len()+1)
	}
	return 0
}

var (
	stringerType = reflect.TypeFor[fmt.Stringer]()
	errorType    = reflect.TypeFor[error]()
)

// How a function reads its arguments, for the budget.
type reads int

const (
	// readsAll: strings and everything lists and maps hold (the default:
	// printing, encoding, copying, comparing).
	readsAll reads = iota
	// readsTop: strings, and lists and maps by their own elements only
	// (append, concat, keys: they copy references).
	readsTop
	// readsKeys: strings only (keys looked up, names, numbers parsed), not
	// lists and maps; the result is a value that exists already (get, dig,
	// set's map), not counted either.
	readsKeys
	// readsNothing: a reference kept or passed on, or a constant; the
	// result is a value that exists already (first, default, list), not
	// counted either.
	readsNothing
)

// makes reports whether a function of r makes what it returns (counted).
func (r reads) makes() bool { return r == readsAll || r == readsTop }

// fnCost is what the budget knows about one function.
type fnCost struct {
	reads reads
	// bound, when set, is an upper bound of the size of the result for these
	// arguments, checked before the call; otherwise 8 times what the call
	// reads (printing, quoting, escaping at most that), plus 4 KiB.
	bound func(args []reflect.Value) int64
	// steps, when set, is what the call costs in steps besides the one every
	// call costs (quadratic list functions, key generation).
	steps func(args []reflect.Value) int64
	// perStep, when set, charges a step for every perStep bytes the call
	// reads: functions slow for their size (regular expressions, rune by
	// rune rewrites), so that a step stays about half a microsecond.
	perStep int64
}

// costs are the functions that do not take the defaults: every other
// function reads all its arguments, and its result is bounded by 8 times
// what it read.
var costs = func() map[string]fnCost {
	m := map[string]fnCost{}
	for _, n := range []string{"get", "hasKey", "set", "unset", "dig", "env", "fail", "kindIs", "typeIs", "typeIsLike",
		"slice", "mustSlice"} {
		m[n] = fnCost{reads: readsKeys}
	}
	for _, n := range []string{"first", "mustFirst", "last", "mustLast", "default", "empty", "coalesce", "ternary",
		"kindOf", "typeOf", "plural", "all", "any", "list", "tuple", "now", "hello", "uuidv4", "randInt"} {
		m[n] = fnCost{reads: readsNothing}
	}
	for _, n := range []string{"append", "push", "mustAppend", "mustPush", "prepend", "mustPrepend",
		"rest", "mustRest", "initial", "mustInitial", "reverse", "mustReverse", "compact", "mustCompact",
		"concat", "chunk", "mustChunk", "keys", "values", "pluck", "pick", "omit", "has", "mustHas"} {
		m[n] = fnCost{reads: readsTop}
	}
	// Quadratic: each element compared with each kept (uniq) or omitted
	// (without), reflect.DeepEqual costing about a 16th of a step.
	m["uniq"] = fnCost{reads: readsAll, steps: func(a []reflect.Value) int64 { n := lenOf(a, 0); return satMul(n, n) / 16 }}
	m["mustUniq"] = m["uniq"]
	m["without"] = fnCost{reads: readsAll, steps: func(a []reflect.Value) int64 { return satMul(lenOf(a, 0), int64(len(a)-1)) / 16 }}
	m["mustWithout"] = m["without"]
	// Key and certificate generation (an RSA key of 4096 bits takes about a
	// second) and scrypt (derivePassword, about 0.6 s): three a render.
	for _, n := range []string{"genPrivateKey", "genCA", "genCAWithKey", "genSelfSignedCert", "genSelfSignedCertWithKey",
		"genSignedCert", "genSignedCertWithKey", "buildCustomCert", "derivePassword"} {
		m[n] = fnCost{reads: readsAll, steps: func([]reflect.Value) int64 { return maxSteps / 4 }}
	}
	// bcrypt: about 0.1 s each, nineteen a render.
	for _, n := range []string{"bcrypt", "htpasswd"} {
		m[n] = fnCost{reads: readsAll, steps: func([]reflect.Value) int64 { return maxSteps / 20 }}
	}
	// Slow for their size (measured: 20 to 135 ns a byte).
	for per, names := range map[int64][]string{
		4: {"regexMatch", "mustRegexMatch", "regexFindAll", "mustRegexFindAll", "regexFind", "mustRegexFind",
			"regexReplaceAll", "mustRegexReplaceAll", "regexReplaceAllLiteral", "mustRegexReplaceAllLiteral",
			"regexSplit", "mustRegexSplit", "shuffle"},
		8:  {"untitle", "kebabcase", "swapcase", "snakecase", "camelcase", "title", "initials"},
		16: {"toJson", "mustToJson", "toPrettyJson", "mustToPrettyJson", "toRawJson", "mustToRawJson", "quote", "fromJson", "mustFromJson"},
	} {
		for _, n := range names {
			m[n] = fnCost{perStep: per}
		}
	}
	// Results bigger than their arguments, bounded before the call.
	// The sized functions: their own bounds (maxRendered, maxListed) come
	// first, with errors that say which.
	m["repeat"] = fnCost{bound: func(a []reflect.Value) int64 {
		return min(satMul(intArg(a, 0), int64(len(strArg(a, 1)))), maxRendered)
	}}
	for _, n := range []string{"randAlpha", "randAlphaNum", "randAscii", "randNumeric", "randBytes"} {
		m[n] = fnCost{bound: func(a []reflect.Value) int64 { return 2 * min(intArg(a, 0), maxRendered) }}
	}
	m["until"] = fnCost{bound: func(a []reflect.Value) int64 { return elemBytes * (min(absArg(a, 0), maxListed) + 1) }}
	m["untilStep"] = fnCost{bound: func(a []reflect.Value) int64 {
		return satMul(min(absArg(a, 0)+absArg(a, 1), maxListed)+1, elemBytes)
	}}
	m["seq"] = fnCost{bound: func([]reflect.Value) int64 { return 21 * (maxListed + 1) }}
	m["indent"] = fnCost{bound: func(a []reflect.Value) int64 {
		s := strArg(a, 1)
		return satMul(int64(strings.Count(s, "\n")+1), min(intArg(a, 0), maxIndent)) + int64(len(s))
	}}
	m["nindent"] = fnCost{bound: func(a []reflect.Value) int64 { return m["indent"].bound(a) + 1 }}
	m["replace"] = fnCost{bound: func(a []reflect.Value) int64 {
		old, nw, src := strArg(a, 0), strArg(a, 1), strArg(a, 2)
		n := int64(utf8.RuneCountInString(src) + 1)
		if old != "" {
			n = int64(strings.Count(src, old))
		}
		return satMul(n, int64(len(nw))) + int64(len(src))
	}}
	m["wrapWith"] = fnCost{bound: func(a []reflect.Value) int64 {
		l, sep, s := max(intArg(a, 0), 1), strArg(a, 1), strArg(a, 2)
		return satMul(int64(len(s))/l+1, int64(len(sep))) + int64(len(s))
	}}
	m["wrap"] = fnCost{bound: func(a []reflect.Value) int64 { return 2*int64(len(strArg(a, 1))) + 1 }}
	m["join"] = fnCost{bound: func(a []reflect.Value) int64 {
		size, _, _ := sizeOf(arg(a, 1), maxValues)
		return satMul(lenOf(a, 1), int64(len(strArg(a, 0)))) + satMul(size, 8)
	}}
	replaceAll := fnCost{bound: func(a []reflect.Value) int64 {
		// Each match is replaced by repl, whose $ references expand to
		// parts of the match: at most len(src) in all, per reference.
		src, repl := strArg(a, 1), strArg(a, 2)
		refs := int64(strings.Count(repl, "$"))
		return satMul(int64(len(src)), refs+1) + satMul(int64(len(src))+1, int64(len(repl)))
	}}
	replaceAll.perStep = 4
	m["regexReplaceAll"], m["mustRegexReplaceAll"] = replaceAll, replaceAll
	literal := fnCost{bound: func(a []reflect.Value) int64 {
		src, repl := strArg(a, 1), strArg(a, 2)
		return int64(len(src)) + satMul(int64(len(src))+1, int64(len(repl)))
	}}
	literal.perStep = 4
	m["regexReplaceAllLiteral"], m["mustRegexReplaceAllLiteral"] = literal, literal
	m["expandenv"] = fnCost{bound: func(a []reflect.Value) int64 {
		s := strArg(a, 0)
		n := int64(len(s))
		os.Expand(s, func(k string) string { n += int64(len(os.Getenv(k))); return "" })
		return n
	}}
	m["printf"] = fnCost{bound: func(a []reflect.Value) int64 {
		// fmt pads to a width or precision of at most 1e6, written in the
		// format or taken from an argument (*).
		format := strArg(a, 0)
		n := satMul(int64(strings.Count(format, "*")), 1e6) + int64(len(format))
		for f := range strings.FieldsFuncSeq(format, func(r rune) bool { return r < '0' || r > '9' }) {
			n += digits(f)
		}
		var rest int64
		for _, v := range variadic(a, 1) {
			s, _, _ := sizeOf(v, maxValues)
			rest += s
		}
		return n + satMul(rest, 8)
	}}
	pretty := fnCost{bound: func(a []reflect.Value) int64 {
		size, depth, _ := sizeOf(arg(a, 0), maxValues)
		return satMul(satMul(size, 8), int64(depth+1))
	}}
	pretty.perStep = 16
	m["toPrettyJson"], m["mustToPrettyJson"] = pretty, pretty
	// Lists and maps of the parts of a string: up to one per byte.
	perByte := func(i int, perStep int64) fnCost {
		return fnCost{perStep: perStep, bound: func(a []reflect.Value) int64 { return satMul(int64(len(strArg(a, i)))+1, 64) }}
	}
	// split is tollgate's (strings.Split: the string first), not sprig's.
	m["split"], m["splitList"], m["splitn"] = perByte(0, 0), perByte(1, 0), perByte(2, 0)
	m["regexSplit"], m["mustRegexSplit"] = perByte(1, 4), perByte(1, 4)
	m["regexFindAll"], m["mustRegexFindAll"] = perByte(1, 4), perByte(1, 4)
	m["fromJson"], m["mustFromJson"] = perByte(0, 16), perByte(0, 16)
	return m
}()

func digits(s string) int64 {
	var n int64
	for _, c := range s {
		n = min(n*10+int64(c-'0'), 1e6)
	}
	return n
}

// satMul is a*b for non-negative a and b, saturating.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > (1<<62)/b {
		return 1 << 62
	}
	return a * b
}

// arg is the i-th argument (of the variadic list too), or the zero Value.
func arg(a []reflect.Value, i int) reflect.Value {
	if i < len(a) {
		return a[i]
	}
	return reflect.Value{}
}

func strArg(a []reflect.Value, i int) string {
	v := indirectIface(arg(a, i))
	if v.IsValid() && v.Kind() == reflect.String {
		return v.String()
	}
	return ""
}

func intArg(a []reflect.Value, i int) int64 {
	v := indirectIface(arg(a, i))
	if v.IsValid() && v.CanInt() {
		return max(v.Int(), 0)
	}
	return 0
}

// absArg is the i-th argument's absolute value when it is an integer.
func absArg(a []reflect.Value, i int) int64 {
	v := indirectIface(arg(a, i))
	if v.IsValid() && v.CanInt() {
		if n := v.Int(); n < 0 {
			return -max(n, -1<<62)
		}
		return min(v.Int(), 1<<62)
	}
	return 0
}

// lenOf is the length of the i-th argument when it is a list or map.
func lenOf(a []reflect.Value, i int) int64 {
	v := indirectIface(arg(a, i))
	if !v.IsValid() {
		return 0
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.String:
		return int64(v.Len())
	}
	return 0
}

// variadic is the arguments from the i-th on, the variadic list spread.
func variadic(a []reflect.Value, i int) []reflect.Value {
	if i >= len(a) {
		return nil
	}
	return a[i:]
}

func indirectIface(v reflect.Value) reflect.Value {
	for v.IsValid() && v.Kind() == reflect.Interface && !v.IsNil() {
		v = v.Elem()
	}
	return v
}

// wrap returns fn charging b for every call: a step (and the function's own
// steps), what it reads, whether its result fits, and what it made. The
// wrapper has fn's parameters, so text/template converts arguments as it
// would for fn, and returns an error besides fn's result.
func (b *budget) wrap(name string, fn any) any {
	v := reflect.ValueOf(fn)
	t := v.Type()
	c := costs[name]
	ins := make([]reflect.Type, t.NumIn())
	for i := range ins {
		ins[i] = t.In(i)
	}
	out0 := t.Out(0)
	ft := reflect.FuncOf(ins, []reflect.Type{out0, errorType}, t.IsVariadic())
	fail := func(err error) []reflect.Value {
		return []reflect.Value{reflect.Zero(out0), reflect.ValueOf(&err).Elem()}
	}
	noErr := reflect.Zero(errorType)
	return reflect.MakeFunc(ft, func(in []reflect.Value) []reflect.Value {
		// The arguments as a flat list (the variadic ones spread).
		args := in
		if t.IsVariadic() {
			last := in[len(in)-1]
			args = make([]reflect.Value, 0, len(in)-1+last.Len())
			args = append(args, in[:len(in)-1]...)
			for i := range last.Len() {
				args = append(args, last.Index(i))
			}
		}
		var read int64
		if c.reads != readsNothing {
			for _, a := range args {
				n, err := b.readSize(a, c.reads)
				if err != nil {
					return fail(err)
				}
				read += n
			}
		}
		if err := b.charge(read); err != nil {
			return fail(err)
		}
		steps := int64(1)
		if c.steps != nil {
			steps += c.steps(args)
		}
		if c.perStep > 0 {
			steps += read / c.perStep
		}
		if err := b.step(steps); err != nil {
			return fail(err)
		}
		if c.reads.makes() {
			bound := satMul(read, 8) + 4<<10
			if c.bound != nil {
				bound = c.bound(args)
			}
			if err := b.fits(bound); err != nil {
				return fail(err)
			}
		}
		var res []reflect.Value
		if t.IsVariadic() {
			res = v.CallSlice(in)
		} else {
			res = v.Call(in)
		}
		if len(res) == 2 && !res[1].IsNil() {
			return res
		}
		if c.reads.makes() {
			if err := b.charge(shallowSize(res[0])); err != nil {
				return fail(err)
			}
		}
		return []reflect.Value{res[0], noErr}
	}).Interface()
}

// readSize is what reading v costs: a string's length, a list's or map's
// elements (readsTop), everything it holds (readsAll) or nothing
// (readsKeys), within what is left.
func (b *budget) readSize(v reflect.Value, r reads) (int64, error) {
	v = indirectIface(v)
	if !v.IsValid() {
		return 0, nil
	}
	switch v.Kind() {
	case reflect.String:
		return int64(v.Len()), nil
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Pointer, reflect.Struct:
		if r == readsKeys {
			return 0, nil
		}
		if r == readsTop && v.Kind() != reflect.Pointer && v.Kind() != reflect.Struct {
			return elemBytes * int64(v.Len()+1), nil
		}
		n, _, err := sizeOf(v, max(b.values, 0))
		if err != nil {
			b.err = err
			return 0, b.err
		}
		return n, nil
	}
	return 0, nil
}

// Names of the hooks instrument adds to a template. They are functions of
// the FuncMap like the others (a template that calls one by name is charged
// for it, nothing more).
const (
	hookPipe  = "_tollgate_pipe"
	hookRange = "_tollgate_range"
	hookPrint = "_tollgate_print"
	hookRead  = "_tollgate_read"
	hookNil   = "_tollgate_nil"
)

// hooks are b's pipeline hooks: each passes its pipeline's value on as it
// is (an interface parameter takes any value, and a missing one as nil, as
// text/template would pass it on).
func (b *budget) hooks() template.FuncMap {
	return template.FuncMap{
		hookPipe: func(v any) (any, error) { return v, b.step(1) },
		hookNil:  func() (any, error) { return nil, b.step(1) },
		hookRange: func(v any) (any, error) {
			n, keys := rangeLen(reflect.ValueOf(v))
			if err := b.charge(keys); err != nil {
				return nil, err
			}
			return v, b.step(1 + n)
		},
		hookPrint: func(v any) (any, error) {
			if err := b.step(1); err != nil {
				return nil, err
			}
			if s, ok := v.(string); ok { // the usual case, counted when written
				return s, nil
			}
			left := int64(maxRendered - b.out.Len())
			if n, _, err := sizeOf(reflect.ValueOf(v), left); err != nil {
				return nil, err
			} else if n > left {
				return nil, errRenderedTooBig
			}
			return v, nil
		},
		hookRead: func(v any) (any, error) {
			if err := b.step(1); err != nil {
				return nil, err
			}
			if s, ok := v.(string); ok {
				return v, b.charge(int64(len(s)))
			}
			return v, nil
		},
	}
}

// rangeLen is how many iterations a range over v runs (an integer: that
// many; text/template ranges over lists, maps, integers, and channels and
// iterator functions, which no function here returns), and the bytes of a
// map's string keys, which the range sorts first.
func rangeLen(v reflect.Value) (n, keyBytes int64) {
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) && !v.IsNil() {
		v = v.Elem()
	}
	if !v.IsValid() {
		return 0, 0
	}
	switch {
	case v.CanInt():
		return max(v.Int(), 0), 0
	case v.CanUint():
		return int64(min(v.Uint(), 1<<62)), 0
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		return int64(v.Len()), 0
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.String {
			for _, k := range v.MapKeys() {
				keyBytes += int64(k.Len())
			}
		}
		return int64(v.Len()), keyBytes
	}
	return 0, 0
}

// comparisons are text/template's builtins that read their string
// arguments whole (index hashes a map key) and cannot be replaced by a
// FuncMap entry without rewriting them: their arguments are charged
// through hookRead.
var comparisons = map[string]bool{"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true, "index": true}

// readsArgs reports whether c's arguments are charged as read (hookRead):
// those of a comparison, and of a method of a value a function returned
// (time.Time's Format with a layout of megabytes), which is no FuncMap
// entry to wrap.
func readsArgs(c *parse.CommandNode) bool {
	if len(c.Args) < 2 {
		return false
	}
	switch a := c.Args[0].(type) {
	case *parse.IdentifierNode:
		return comparisons[a.Ident]
	case *parse.FieldNode, *parse.ChainNode:
		return true
	case *parse.VariableNode:
		return len(a.Ident) > 1
	}
	return false
}

// instrument adds the budget's hooks to every template of tmpl (its
// {{ define }}s too): hookPipe at the end of every pipeline, hookRange at
// the end of a range's, hookPrint at the end of an action's that prints,
// hookNil at the start of the template, hookRead around each argument of a
// comparison or a method.
func instrument(tmpl *template.Template) {
	for _, t := range tmpl.Templates() {
		if t.Tree == nil || t.Tree.Root == nil {
			continue
		}
		root := t.Tree.Root
		instrumentNode(root)
		// {{ $tollgate := hookNil }} first: a step for every execution of
		// the template (a call without an argument has no pipeline).
		enter := &parse.ActionNode{NodeType: parse.NodeAction, Pos: root.Pos, Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Pos: root.Pos,
			Decl: []*parse.VariableNode{{NodeType: parse.NodeVariable, Pos: root.Pos, Ident: []string{"$tollgate"}}},
			Cmds: []*parse.CommandNode{command(hookNil, root.Pos)}}}
		root.Nodes = append([]parse.Node{enter}, root.Nodes...)
	}
}

func instrumentNode(n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			instrumentNode(c)
		}
	case *parse.ActionNode:
		hook := hookPrint
		if len(n.Pipe.Decl) > 0 {
			hook = hookPipe
		}
		instrumentPipe(n.Pipe, hook)
	case *parse.IfNode:
		instrumentBranch(&n.BranchNode, hookPipe)
	case *parse.WithNode:
		instrumentBranch(&n.BranchNode, hookPipe)
	case *parse.RangeNode:
		instrumentBranch(&n.BranchNode, hookRange)
	case *parse.TemplateNode:
		instrumentPipe(n.Pipe, hookPipe)
	}
}

func instrumentBranch(n *parse.BranchNode, hook string) {
	instrumentPipe(n.Pipe, hook)
	instrumentNode(n.List)
	instrumentNode(n.ElseList)
}

// instrumentPipe appends hook to p, after instrumenting the pipelines in
// its arguments.
func instrumentPipe(p *parse.PipeNode, hook string) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		reads := readsArgs(c)
		for i, a := range c.Args {
			instrumentArg(a)
			if i > 0 && reads {
				c.Args[i] = readPipe(a)
			}
		}
	}
	p.Cmds = append(p.Cmds, command(hook, p.Pos))
}

func instrumentArg(a parse.Node) {
	switch a := a.(type) {
	case *parse.PipeNode:
		instrumentPipe(a, hookPipe)
	case *parse.ChainNode:
		instrumentArg(a.Node)
	}
}

// readPipe is (a | hookRead): a's value, charged as read. Constants other
// than strings are left as they are (text/template converts them to the
// argument's type, which a pipeline would not).
func readPipe(a parse.Node) parse.Node {
	switch a.(type) {
	case *parse.BoolNode, *parse.NumberNode, *parse.NilNode:
		return a
	}
	return &parse.PipeNode{NodeType: parse.NodePipe, Pos: a.Position(),
		Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand, Pos: a.Position(), Args: []parse.Node{a}}, command(hookRead, a.Position())}}
}

func command(name string, pos parse.Pos) *parse.CommandNode {
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos,
		Args: []parse.Node{parse.NewIdentifier(name).SetPos(pos)}}
}

// getHostByName is sprig's, within the render's deadline: a random one of
// the name's addresses.
func (b *budget) getHostByName(name string) (string, error) {
	addrs, err := net.DefaultResolver.LookupHost(b.ctx, name)
	if err != nil {
		return "", err
	}
	if len(addrs) == 0 {
		return "", errors.New("no address for " + name)
	}
	return addrs[rand.IntN(len(addrs))], nil
}
