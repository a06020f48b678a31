package file

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"

	"github.com/tollgate-proxy/tollgate/provider"
)

// maxRendered bounds what a dynamic file's template may expand to.
const maxRendered = 16 << 20

// maxListed bounds the lists until, untilStep and seq build.
const maxListed = 100_000

// Render executes a dynamic file as a Go template, as Traefik's file
// provider executes every file it reads (docs/reference/providers/file.md,
// "Templates in dynamic files"): text/template with sprig's functions (env,
// default, until, ...), plus normalize (provider.Normalize) and split (strings.Split), and
// no data. A file without "{{" is returned as it is, as the template would
// return it.
//
// A render is bounded in what it writes (maxRendered), in what its
// functions make and read (maxValues), in its work (maxSteps) and in time
// (renderTimeout), whatever functions it uses: see budget.go. Sprig's
// until, untilStep, seq, repeat and rand* are bounded besides, to
// maxListed elements and maxRendered bytes.
//
// A template that does not parse or execute, or that goes over a bound, is
// a *DecodeError naming the file and the line.
func Render(content, name string) (string, error) {
	if !strings.Contains(content, "{{") {
		return content, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), renderTimeout)
	defer cancel()
	var out boundedBuilder
	r := renderers.Get().(*renderer)
	defer renderers.Put(r)
	b := r.budget
	b.reset(ctx, &out)
	defer b.release()
	tmpl, err := template.New(name).Funcs(r.funcs).Parse(content)
	if err != nil {
		return "", templateError(name, err)
	}
	instrument(tmpl)
	if err := tmpl.Execute(&out, nil); err != nil {
		return "", templateError(name, err)
	}
	return out.String(), nil
}

// A renderer is a budget and the FuncMap charging it: every function of
// funcs wrapped (budget.wrap), and the budget's hooks. Wrapping every
// function costs more than a small render, so renderers are pooled; a
// renderer serves one render at a time.
type renderer struct {
	budget *budget
	funcs  template.FuncMap
}

var renderers = sync.Pool{New: func() any {
	b := &budget{}
	m := make(template.FuncMap, len(funcs)+8)
	for name, fn := range funcs {
		m[name] = b.wrap(name, fn)
	}
	m["getHostByName"] = b.wrap("getHostByName", b.getHostByName)
	maps.Copy(m, b.hooks())
	return &renderer{budget: b, funcs: m}
}}

// funcs are Traefik's: sprig's text functions, normalize and split, with
// the ones that build something of a size the file gives bounded.
var funcs = func() template.FuncMap {
	m := sprig.TxtFuncMap()
	// text/template's own functions that make strings, so that the budget
	// counts them as the others (a FuncMap entry takes a builtin's place).
	m["print"], m["printf"], m["println"] = fmt.Sprint, fmt.Sprintf, fmt.Sprintln
	m["html"], m["js"], m["urlquery"] = template.HTMLEscaper, template.JSEscaper, template.URLQueryEscaper
	m["normalize"] = provider.Normalize
	m["split"] = strings.Split
	m["until"] = func(count int) ([]int, error) {
		step := 1
		if count < 0 {
			step = -1
		}
		return untilStep(0, count, step)
	}
	m["untilStep"] = untilStep
	m["seq"] = seq
	m["repeat"] = func(count int, s string) (string, error) {
		if count < 0 || len(s) > 0 && count > maxRendered/len(s) {
			return "", fmt.Errorf("repeat %d times %d bytes: over %d bytes", count, len(s), maxRendered)
		}
		return strings.Repeat(s, count), nil
	}
	// Functions whose first argument is a size.
	for _, name := range []string{"randAlpha", "randAlphaNum", "randAscii", "randNumeric", "randBytes"} {
		if name == "randBytes" {
			g := m[name].(func(int) (string, error))
			m[name] = func(n int) (string, error) {
				if n > maxRendered {
					return "", fmt.Errorf("%s %d: over %d bytes", name, n, maxRendered)
				}
				return g(n)
			}
			continue
		}
		f := m[name].(func(int) string)
		m[name] = func(n int) (string, error) {
			if n > maxRendered {
				return "", fmt.Errorf("%s %d: over %d bytes", name, n, maxRendered)
			}
			return f(n), nil
		}
	}
	for _, name := range []string{"indent", "nindent"} {
		f := m[name].(func(int, string) string)
		m[name] = func(n int, s string) (string, error) {
			if n > maxIndent {
				return "", fmt.Errorf("%s %d: over %d spaces", name, n, maxIndent)
			}
			return f(n, s), nil
		}
	}
	return m
}()

// maxIndent bounds indent and nindent, which repeat their spaces on every
// line.
const maxIndent = 1 << 10

// untilStep is sprig's: the integers from start towards stop by step,
// stop excluded; none when step does not lead there.
func untilStep(start, stop, step int) ([]int, error) {
	var n int
	switch {
	case step > 0 && start < stop:
		n = (stop - start + step - 1) / step
	case step < 0 && start > stop:
		n = (start - stop - step - 1) / -step
	}
	if n < 0 || n > maxListed {
		return nil, fmt.Errorf("a list of over %d integers (from %d to %d by %d)", maxListed, start, stop, step)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// seq is sprig's, after GNU seq: "seq last", "seq first last" or "seq
// first step last", the integers from first to last joined by spaces.
func seq(params ...int) (string, error) {
	var nums []int
	var err error
	switch len(params) {
	case 1:
		start, end, inc := 1, params[0], 1
		if end < start {
			inc = -1
		}
		nums, err = untilStep(start, end+inc, inc)
	case 2:
		start, end, step := params[0], params[1], 1
		if end < start {
			step = -1
		}
		nums, err = untilStep(start, end+step, step)
	case 3:
		start, step, end, inc := params[0], params[1], params[2], 1
		if end < start {
			inc = -1
			if step > 0 {
				return "", nil
			}
		}
		nums, err = untilStep(start, end+inc, step)
	default:
		return "", nil
	}
	if err != nil {
		return "", err
	}
	parts := make([]string, len(nums))
	for i, v := range nums {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " "), nil
}

// boundedBuilder is a strings.Builder that refuses to grow past maxRendered.
type boundedBuilder struct{ strings.Builder }

// errRenderedTooBig is a template that writes more than maxRendered.
var errRenderedTooBig = fmt.Errorf("the template renders over %d bytes", maxRendered)

func (b *boundedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxRendered {
		return 0, errRenderedTooBig
	}
	return b.Builder.Write(p)
}

// templateError places text/template's error ("template: NAME:LINE:COL:
// ..." or "template: NAME:LINE: ...") on its line. A bound met is said
// alone, not as the hook or function that met it.
func templateError(name string, err error) *DecodeError {
	de := &DecodeError{File: name, Err: err}
	bound := true // a bound met, said alone
	var be *BudgetError
	switch {
	case errors.As(err, &be):
		de.Err = fmt.Errorf("template: %w", be)
	case errors.Is(err, errRenderedTooBig):
		de.Err = errRenderedTooBig
	default:
		bound = false
	}
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "template: "+name+":")
	if !ok {
		return de
	}
	lineStr, after, ok := strings.Cut(rest, ":")
	line, err2 := strconv.Atoi(lineStr)
	if !ok || err2 != nil {
		return de
	}
	de.Line = line
	if bound {
		return de
	}
	if col, more, ok := strings.Cut(after, ":"); ok {
		if _, err := strconv.Atoi(col); err == nil {
			after = more
		}
	}
	after = strings.TrimSpace(after)
	after = strings.TrimPrefix(after, "executing "+strconv.Quote(name)+" ")
	de.Err = errors.New("template: " + after)
	return de
}
