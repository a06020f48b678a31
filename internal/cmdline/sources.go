package cmdline

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/traefik/paerser/cli"
	"github.com/traefik/paerser/env"
	pfile "github.com/traefik/paerser/file"
	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
)

// envPrefix is the prefix of the environment variables that carry the
// static configuration (TOLLGATE_ENTRYPOINTS_DB_ADDRESS=:5432).
const envPrefix = "TOLLGATE_"

// traefikEnvPrefix is Traefik's: its variables are read when no TOLLGATE_
// variable is set, so that a Traefik container's environment configures
// tollgate unchanged.
const traefikEnvPrefix = "TRAEFIK_"

// configBasePaths are where a configuration file is looked for without
// --configFile, each with .toml, .yaml and .yml: tollgate's places, then
// Traefik's (a Traefik container's mounted traefik.yml is read unchanged).
var configBasePaths = []string{"/etc/tollgate/tollgate", "$HOME/.config/tollgate", "./tollgate",
	"/etc/traefik/traefik", "$XDG_CONFIG_HOME/traefik", "$HOME/.config/traefik", "./traefik"}

// sources are where one command reads the static configuration from, and,
// once read, which of them it was: --configFile (else a file in
// configBasePaths), else flags, else TOLLGATE_* variables (else TRAEFIK_*
// ones). As in Traefik,
// the first source that has anything wins; they do not mix. An error about
// the configuration names where it was written: the flag, the variable, or
// the file and line (name, and each loader's own decoding errors).
type sources struct {
	environ []string     // the process's environment, "NAME=value"
	from    string       // "file", "flags", "env"; "" until one is read
	file    string       // the configuration file, as given or found
	content string       // its content
	unknown []UnknownKey // its top-level keys that name no option
	args    []string     // the flags
	env     []string     // the TOLLGATE_ (or TRAEFIK_) variables, "NAME=value"
	prefix  string       // which of the two
}

// start is what run is given once the sources are read.
func (s *sources) start(checkOnly bool) Start {
	return Start{Ignored: s.ignored(s.environ), UnknownKeys: s.unknown, CheckOnly: checkOnly}
}

// loaders are the paerser resource loaders, in order of precedence, that
// fill s as they read.
func (s *sources) loaders() []cli.ResourceLoader {
	return []cli.ResourceLoader{fileLoader{s}, flagLoader{s}, envLoader{s}}
}

type fileLoader struct{ s *sources }

// Load decodes the configuration file (as paerser's FileLoader does) and
// reports a decoding error at its file and line.
func (l fileLoader) Load(args []string, cmd *cli.Command) (bool, error) {
	ref, err := flag.Parse(args, cmd.Configuration)
	if err != nil {
		return false, err
	}
	given := ""
	for k, v := range ref {
		if strings.EqualFold(k, "traefik.configFile") {
			given = v
		}
	}
	path, err := cli.Finder{BasePaths: configBasePaths, Extensions: []string{"toml", "yaml", "yml"}}.Find(given)
	if err != nil || path == "" {
		return false, err
	}
	shown := path
	if abs, err := filepath.Abs(os.ExpandEnv(given)); given != "" && err == nil && abs == path {
		shown = given
	}
	content, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("configuration file %s: %w", shown, err)
	}
	l.s.from, l.s.file, l.s.content = "file", shown, string(content)
	if err := pfile.Decode(path, cmd.Configuration); err != nil {
		key, line := decodeerr.Blame(l.s.content, filepath.Ext(path), err)
		return false, fmt.Errorf("%s%s", l.s.at(key, line), explain(key, err))
	}
	l.s.unknown = unknownTopLevel(shown, l.s.content, filepath.Ext(path), cmd.Configuration)
	return true, nil
}

// An UnknownKey is a top-level key of the configuration file that names no
// option. paerser skips it, as Traefik does (a key nested under a known one
// is an error); tollgate warns about it at start, so that a typo
// (entryPointz) does not go unnoticed, without refusing a file Traefik
// starts with.
type UnknownKey struct {
	File, Key string
	Line      int
}

// String says where the key is and why it is warned about.
func (k UnknownKey) String() string {
	loc := k.File
	if k.Line > 0 {
		loc += ":" + strconv.Itoa(k.Line)
	}
	return fmt.Sprintf("%s: %s: unknown top-level key, skipped: it names no option (see tollgate --help)", loc, k.Key)
}

// unknownTopLevel returns the top-level keys of a YAML or TOML file's
// content that are no field of configuration (compared as paerser does,
// case-insensitively), each with its line.
func unknownTopLevel(file, content, ext string, configuration any) []UnknownKey {
	var keys []string
	switch strings.ToLower(ext) {
	case ".toml":
		var m map[string]any
		if _, err := toml.Decode(content, &m); err != nil {
			return nil
		}
		for k := range m {
			keys = append(keys, k)
		}
	default:
		var m map[string]any
		if err := yaml.Unmarshal([]byte(content), &m); err != nil {
			return nil
		}
		for k := range m {
			keys = append(keys, k)
		}
	}
	known := map[string]bool{}
	for _, name := range fieldNames(reflect.TypeOf(configuration)) {
		known[strings.ToLower(name)] = true
	}
	var out []UnknownKey
	for _, k := range keys {
		if known[strings.ToLower(k)] {
			continue
		}
		_, line := decodeerr.Find(content, ext, []string{k})
		out = append(out, UnknownKey{File: file, Key: k, Line: line})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Line < out[j].Line || out[i].Line == out[j].Line && out[i].Key < out[j].Key
	})
	return out
}

// fieldNames are the names paerser knows a struct's fields by (their json
// names, else their Go names), embedded structs' included.
func fieldNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			out = append(out, fieldNames(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

type flagLoader struct{ s *sources }

// Load decodes the flags; a bad one is named by ValidateFlags.
func (l flagLoader) Load(args []string, cmd *cli.Command) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	l.s.from, l.s.args = "flags", args
	if err := flag.Decode(args, cmd.Configuration); err != nil {
		if one := ValidateFlags(args); one != nil {
			return false, one
		}
		return false, fmt.Errorf("flags %s: %s", strings.Join(args, " "), explain("", err))
	}
	return true, nil
}

type envLoader struct{ s *sources }

// Load decodes the TOLLGATE_ variables, or, when there are none, the
// TRAEFIK_ ones. When they do not decode, each is decoded alone to name the
// one at fault.
func (l envLoader) Load(_ []string, cmd *cli.Command) (bool, error) {
	prefix := envPrefix
	vars := env.FindPrefixedEnvVars(l.s.environ, prefix, cmd.Configuration)
	if len(vars) == 0 {
		prefix = traefikEnvPrefix
		vars = env.FindPrefixedEnvVars(l.s.environ, prefix, cmd.Configuration)
	}
	if len(vars) == 0 {
		return false, nil
	}
	sort.Strings(vars)
	l.s.from, l.s.env, l.s.prefix = "env", vars, prefix
	err := env.Decode(vars, prefix, cmd.Configuration)
	if err == nil {
		return true, nil
	}
	for _, v := range vars {
		if one := env.Decode([]string{v}, prefix, config.NewCommand()); one != nil {
			name, value, _ := strings.Cut(v, "=")
			if refused := config.RefusedOption(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, prefix), "_", "."))); refused != nil {
				return false, fmt.Errorf("environment variable %s=%q: %w", name, value, refused)
			}
			return false, fmt.Errorf("environment variable %s=%q: %s", name, value, explain("", one))
		}
	}
	names := make([]string, len(vars))
	for i, v := range vars {
		names[i], _, _ = strings.Cut(v, "=")
	}
	return false, fmt.Errorf("environment variables %s: %s", strings.Join(names, ", "), explain("", err))
}

// An IgnoredVariable is a TOLLGATE_ or TRAEFIK_ variable of the environment
// that configures nothing, and why: a start logs each (internal/preflight),
// so that a misspelled root or a variable beside a configuration file is not
// silently without effect.
type IgnoredVariable struct{ Name, Why string }

// serviceLink matches the variables Kubernetes sets for a Service in the
// pod's namespace (a Service named tollgate or traefik-admin gives
// TOLLGATE_SERVICE_HOST, TOLLGATE_PORT_8080_TCP_ADDR, ...): they are not
// meant for tollgate, so they are not reported.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]*?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// forHealthcheck matches the variables `tollgate healthcheck` reads to find
// the admin API: set beside flags or a file, they are for it (a container's
// health check runs it without the flags; Dockerfile), not left over.
var forHealthcheck = regexp.MustCompile(`^(TOLLGATE|TRAEFIK)_(API|PING|METRICS_PROMETHEUS|ENTRYPOINTS_TRAEFIK)(_|$)`)

// notConfiguration are TOLLGATE_ variables tollgate reads that are not
// configuration (TOLLGATE_REFUSE fixes how refusals close, for bench/).
var notConfiguration = map[string]bool{"TOLLGATE_REFUSE": true}

// ignored returns the TOLLGATE_ and TRAEFIK_ variables of environ that the
// sources read did not take: under an option's root, those beside a file or
// flags (sources do not mix) and TRAEFIK_ ones beside TOLLGATE_ ones; under
// no option's root (paerser skips them silently), those of the prefix read
// when the configuration came from variables or from nowhere: a misspelled
// root. Under no root beside a file or flags, a variable is someone else's
// (a script's TOLLGATE_SOMETHING), and not reported.
func (s *sources) ignored(environ []string) []IgnoredVariable {
	read := make(map[string]bool, len(s.env))
	for _, v := range s.env {
		read[v] = true
	}
	var out []IgnoredVariable
	for _, v := range environ {
		name, _, _ := strings.Cut(v, "=")
		prefix := envPrefix
		if !strings.HasPrefix(name, prefix) {
			prefix = traefikEnvPrefix
			if !strings.HasPrefix(name, prefix) {
				continue
			}
		}
		if read[v] || notConfiguration[name] || serviceLink.MatchString(name) {
			continue
		}
		if (s.from == "file" || s.from == "flags") && forHealthcheck.MatchString(name) {
			continue
		}
		rooted := len(env.FindPrefixedEnvVars([]string{v}, prefix, config.NewCommand())) > 0
		if !rooted && (s.from == "file" || s.from == "flags" || s.from == "env" && prefix != s.prefix) {
			continue
		}
		why := ""
		switch {
		case s.from == "file":
			why = "not read: the static configuration comes from " + s.file + ", and sources do not mix (a file, else flags, else variables)"
		case s.from == "flags":
			why = "not read: the static configuration comes from flags, and sources do not mix (a file, else flags, else variables)"
		case s.from == "env" && prefix != s.prefix:
			why = "not read: TOLLGATE_ variables are set, and TRAEFIK_ ones are read only when none is"
		default:
			why = "names no option: not read (the options are in tollgate --help; " + prefix + "ENTRYPOINTS_<NAME>_ADDRESS is --entryPoints.<name>.address)"
		}
		out = append(out, IgnoredVariable{Name: name, Why: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// at is the location prefix of an error about key (dotted, as written) in
// the configuration file: "file:line: key: ", "file: key: " or "file: ".
func (s *sources) at(key string, line int) string {
	loc := s.file
	if line > 0 {
		loc += fmt.Sprintf(":%d", line)
	}
	if key != "" {
		loc += ": " + key
	}
	return loc + ": "
}

// keyPrefix matches the option an error of the static configuration begins
// with, as config.Static.Validate and the providers' constructors write it:
// `entryPoints.db.address="5432": ...`, `providers.file: ...`.
var keyPrefix = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)+)([=:])`)

// name rewrites an error that begins with an option's key so that it names
// where that option was written: the flag as given, the variable,
// or the configuration file and line. Other errors are returned as they are.
func (s *sources) name(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	m := keyPrefix.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	key, rest := m[1], msg[len(m[1]):]
	covers := func(k string) bool { // k sets key, or something under it
		k = strings.ToLower(k)
		return k == strings.ToLower(key) || strings.HasPrefix(k, strings.ToLower(key)+".")
	}
	switch s.from {
	case "flags":
		for _, a := range s.args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if covers(name) {
				if strings.EqualFold(name, key) {
					return &sourceError{"flag --" + name + rest, err}
				}
				return &sourceError{"flag --" + name + ": " + msg, err}
			}
		}
	case "env":
		for _, v := range s.env {
			name, _, _ := strings.Cut(v, "=")
			dotted := strings.ReplaceAll(strings.TrimPrefix(strings.ToUpper(name), s.prefix), "_", ".")
			if covers(dotted) {
				if strings.EqualFold(dotted, key) {
					return &sourceError{"environment variable " + name + rest, err}
				}
				return &sourceError{"environment variable " + name + ": " + msg, err}
			}
		}
	case "file":
		written, line := decodeerr.Find(s.content, filepath.Ext(s.file), strings.Split(key, "."))
		if line > 0 && strings.EqualFold(written, key) {
			return &sourceError{fmt.Sprintf("%s:%d: %s%s", s.file, line, written, rest), err}
		}
		return &sourceError{s.at("", line) + msg, err}
	}
	return err
}

// sourceError is an error of the static configuration with where it was
// written in front.
type sourceError struct {
	msg string
	err error
}

func (e *sourceError) Error() string { return e.msg }
func (e *sourceError) Unwrap() error { return e.err }
