package cmdline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// staticError runs the tollgate command as main does, with args and only
// the TOLLGATE_ variables given, and a run function that validates the
// static configuration as main's does; it returns the error line ("" when
// none).
func staticError(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	line, _ := runStatic(t, env, args...)
	return line
}

// runStatic is staticError that also returns the variables run was told
// configure nothing.
func runStatic(t *testing.T, env map[string]string, args ...string) (string, []IgnoredVariable) {
	t.Helper()
	line, start := runStart(t, env, args...)
	return line, start.Ignored
}

// runStart is runStatic, returning all that run is given.
func runStart(t *testing.T, env map[string]string, args ...string) (string, Start) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, envPrefix) || strings.HasPrefix(name, traefikEnvPrefix) {
			t.Setenv(name, "") // restored after the test
			_ = os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	saved := os.Args
	os.Args = append([]string{"tollgate"}, args...)
	defer func() { os.Args = saved }()
	cmd := config.NewCommand()
	var start Start
	line := execute(Root(cmd, os.Environ(), func(s Start) error {
		start = s
		return cmd.Static.Validate()
	}, "test"))
	return line, start
}

// A TOLLGATE_ or TRAEFIK_ variable that configures nothing is reported to
// run (main logs it), with why: under no option's root (paerser skips those
// silently), beside a configuration file or flags (sources do not mix), a
// TRAEFIK_ one beside TOLLGATE_ ones. Kubernetes' service links, variables
// that were read, and those tollgate healthcheck reads (beside flags) are
// not.
func TestIgnoredVariablesAreReported(t *testing.T) {
	links := map[string]string{"TOLLGATE_SERVICE_HOST": "10.0.0.1", "TOLLGATE_SERVICE_PORT": "5432",
		"TOLLGATE_SERVICE_PORT_DB": "5432", "TOLLGATE_PORT": "tcp://10.0.0.1:5432",
		"TOLLGATE_PORT_5432_TCP": "tcp://10.0.0.1:5432", "TOLLGATE_PORT_5432_TCP_ADDR": "10.0.0.1",
		"TRAEFIK_ADMIN_SERVICE_HOST": "10.0.0.2", "TOLLGATE_REFUSE": "reset"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range links {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	file := itest.WriteFile(t, "tollgate.yml", "entryPoints:\n  db:\n    address: \":5432\"\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want map[string]string // name: a word of why
		line string            // the error, when the configuration is incomplete
	}{
		{name: "misspelled root", env: with(map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TOLLGATE_ENTRYPOINT_WEB_ADDRESS": ":80"}),
			want: map[string]string{"TOLLGATE_ENTRYPOINT_WEB_ADDRESS": "names no option"}},
		{name: "only unknown roots", env: with(map[string]string{"TRAEFIK_PILOT_TOKEN": "t"}),
			want: map[string]string{"TRAEFIK_PILOT_TOKEN": "names no option"},
			line: "no entry point configured: set --entryPoints.<name>.address=[host]:port"},
		{name: "traefik beside tollgate", env: with(map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TRAEFIK_LOG_LEVEL": "DEBUG", "TRAEFIK_SOMETOOL": "1"}),
			want: map[string]string{"TRAEFIK_LOG_LEVEL": "read only when none is"}},
		// TOLLGATE_API_ADDRESS beside flags is for tollgate healthcheck (Dockerfile).
		// TOLLGATE_SOMETOOL, under no root beside flags, is someone else's.
		{name: "beside flags", env: with(map[string]string{"TOLLGATE_LOG_LEVEL": "DEBUG", "TOLLGATE_API_ADDRESS": ":9000", "TOLLGATE_SOMETOOL": "1"}), args: []string{"--entryPoints.db.address=:5432"},
			want: map[string]string{"TOLLGATE_LOG_LEVEL": "comes from flags"}},
		{name: "beside a file", env: with(map[string]string{"TRAEFIK_LOG_LEVEL": "DEBUG"}), args: []string{"--configFile=" + file},
			want: map[string]string{"TRAEFIK_LOG_LEVEL": "comes from " + file}},
		{name: "all read", env: with(map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TOLLGATE_LOG_LEVEL": "DEBUG"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, ignored := runStatic(t, tc.env, tc.args...)
			if line != tc.line {
				t.Fatalf("error %q, want %q", line, tc.line)
			}
			got := map[string]string{}
			for _, v := range ignored {
				got[v.Name] = v.Why
			}
			for name, word := range tc.want {
				if !strings.Contains(got[name], word) {
					t.Errorf("%s: reported as %q, want it reported saying %q", name, got[name], word)
				}
			}
			for name, why := range got {
				if _, ok := tc.want[name]; !ok {
					t.Errorf("%s reported (%q); it is read, or not meant for tollgate", name, why)
				}
			}
		})
	}
}

// Every static configuration error names where the bad option was written
// (the TOLLGATE_ variable, the configuration file and line, the flag) and
// says what was expected, whether paerser fails to decode it or the
// validation after decoding refuses it.
func TestStaticErrorsNameTheirSource(t *testing.T) {
	const hostPort = `not [host]:port: address 5432: missing port in address`
	const duration = `must be a duration such as 10s or 1m30s (a bare number is seconds), got "ten"`
	yml := func(t *testing.T, content string) string { return itest.WriteFile(t, "tollgate.yml", content) }
	toml := func(t *testing.T, content string) string { return itest.WriteFile(t, "tollgate.toml", content) }
	for _, tc := range []struct {
		name string
		env  map[string]string
		file func(t *testing.T) string // a --configFile, when set
		args []string
		want string // with FILE for the configuration file's path
	}{
		{name: "env unknown option", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADRESS": ":5432"},
			want: `environment variable TOLLGATE_ENTRYPOINTS_DB_ADRESS=":5432": unknown option "adress" (see tollgate --help)`},
		{name: "env bad duration", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TOLLGATE_ENTRYPOINTS_DB_TRANSPORT_LIFECYCLE_GRACETIMEOUT": "ten"},
			want: `environment variable TOLLGATE_ENTRYPOINTS_DB_TRANSPORT_LIFECYCLE_GRACETIMEOUT="ten": ` + duration},
		{name: "env bad address", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": "5432"},
			want: `environment variable TOLLGATE_ENTRYPOINTS_DB_ADDRESS="5432": ` + hostPort},
		{name: "env bad log level", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TOLLGATE_LOG_LEVEL": "LOUD"},
			want: `environment variable TOLLGATE_LOG_LEVEL="LOUD": use DEBUG, INFO, WARN or ERROR`},
		{name: "env under a refused section", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TOLLGATE_PROVIDERS_FILE_WATCH": "true"},
			want: `environment variable TOLLGATE_PROVIDERS_FILE_WATCH: providers.file: set filename or directory`},

		{name: "traefik env", env: map[string]string{"TRAEFIK_ENTRYPOINTS_DB_ADDRESS": "5432"},
			want: `environment variable TRAEFIK_ENTRYPOINTS_DB_ADDRESS="5432": ` + hostPort},
		{name: "tollgate env over traefik env", env: map[string]string{"TOLLGATE_ENTRYPOINTS_DB_ADDRESS": ":5432", "TRAEFIK_ENTRYPOINTS_DB_ADDRESS": "5432"},
			want: ""},

		{name: "yaml unknown option", file: func(t *testing.T) string { return yml(t, "entryPoints:\n  db:\n    adress: \":5432\"\n") },
			want: `FILE:3: entryPoints.db.adress: unknown option "adress" (see tollgate --help)`},
		{name: "toml unknown option", file: func(t *testing.T) string { return toml(t, "[entryPoints.db]\n  adress = \":5432\"\n") },
			want: `FILE:2: entryPoints.db.adress: unknown option "adress" (see tollgate --help)`},
		{name: "yaml bad duration", file: func(t *testing.T) string {
			return yml(t, "entryPoints:\n  db:\n    address: \":5432\"\n    transport:\n      lifeCycle:\n        graceTimeOut: ten\n")
		}, want: `FILE:6: entryPoints.db.transport.lifeCycle.graceTimeOut: graceTimeOut ` + duration},
		{name: "toml bad integer", file: func(t *testing.T) string {
			return toml(t, "[entryPoints.db]\n  address = \":5432\"\n  [entryPoints.db.transport]\n    maxUnroutedPerIP = \"many\"\n")
		}, want: `FILE:4: entryPoints.db.transport.maxUnroutedPerIP: maxUnroutedPerIP must be an integer, got "many"`},
		{name: "yaml bad address", file: func(t *testing.T) string { return yml(t, "entryPoints:\n  db:\n    address: \"5432\"\n") },
			want: `FILE:3: entryPoints.db.address="5432": ` + hostPort},
		{name: "toml bad address", file: func(t *testing.T) string { return toml(t, "[entryPoints.db]\n  address = \"5432\"\n") },
			want: `FILE:2: entryPoints.db.address="5432": ` + hostPort},
		{name: "yaml refused section", file: func(t *testing.T) string {
			return yml(t, "entryPoints:\n  db:\n    address: \":5432\"\nproviders:\n  file:\n    watch: true\n")
		}, want: `FILE:5: providers.file: set filename or directory`},

		// Traefik's options that tollgate refuses: an error naming the
		// option, where it was written, saying it is not supported.
		{name: "yaml refused nested option", file: func(t *testing.T) string {
			return yml(t, "entryPoints:\n  db:\n    address: \":5432\"\nproviders:\n  nomad:\n    endpoint:\n      address: http://127.0.0.1:4646\n")
		}, want: `FILE:6: providers.nomad.endpoint: ` + config.RefusedProvider("providers.nomad").Error()},
		{name: "toml refused nested option", file: func(t *testing.T) string {
			return toml(t, "[entryPoints.db]\n  address = \":5432\"\n[tcpServersTransport.tls.spiffe]\n  ids = [\"spiffe://a/b\"]\n")
		}, want: `FILE:3: tcpServersTransport.tls.spiffe: not supported: ` + config.MatchOption("tcpServersTransport.tls.spiffe").Why},
		{name: "env refused option", env: map[string]string{"TRAEFIK_ENTRYPOINTS_DB_ADDRESS": ":5432", "TRAEFIK_PROVIDERS_ECS_REGION": "eu-west-1"},
			want: `environment variable TRAEFIK_PROVIDERS_ECS_REGION="eu-west-1": ` + config.RefusedProvider("providers.ecs").Error()},
		{name: "flag refused option", args: []string{"--entryPoints.db.address=:5432", "--providers.consulCatalog.connectAware=true"},
			want: `flag --providers.consulCatalog.connectAware="true": not supported: ` + config.MatchOption("providers.consulCatalog.connectAware").Why},
		{name: "flag refused block with a field", args: []string{"--entryPoints.db.address=:5432", "--providers.kubernetesGateway"},
			want: `flag --` + config.RefusedProvider("providers.kubernetesGateway").Error()},
		// Traefik's flag parser reads a value after a space, for an option
		// that is not a boolean or a block.
		{name: "flag value after a space", args: []string{"--entryPoints.db.address=:5432", "--log.level", "DEBUG", "--api", "--ping"}, want: ""},
		{name: "flag bad value after a space", args: []string{"--entryPoints.db.address=:5432", "--log.level", "LOUD"},
			want: `flag --log.level="LOUD": use DEBUG, INFO, WARN or ERROR`},
		{name: "flag without its value", args: []string{"--entryPoints.db.address=:5432", "--log.level"},
			want: `flag --log.level="": a value is needed: --log.level=VALUE or --log.level VALUE (see tollgate --help)`},
		{name: "a block's flag takes no value", args: []string{"--entryPoints.db.address=:5432", "--api", "true"},
			want: `unexpected argument "true" after --api: give this option its value with '=' (--api=true)`},
		// paerser reads a name under a map's name followed by a space as
		// true (and stops there): an error here.
		{name: "a named option's value after a space", args: []string{"--entryPoints.db.address", ":5432"},
			want: `unexpected argument ":5432" after --entryPoints.db.address: give this option its value with '=' (--entryPoints.db.address=:5432)`},
		{name: "flag bad address", args: []string{"--entryPoints.db.address=5432"},
			want: `flag --entryPoints.db.address="5432": ` + hostPort},
		{name: "flag bad integer", args: []string{"--entryPoints.db.address=:5432", "--entryPoints.db.transport.maxUnroutedPerIP=many"},
			want: `flag --entryPoints.db.transport.maxUnroutedPerIP="many": maxUnroutedPerIP must be an integer, got "many"`},
		{name: "demo flag", args: []string{"demo", "--entryPoints.db.adress=:5432"},
			want: `flag --entryPoints.db.adress=":5432": unknown option "adress" (see tollgate --help)`},
		{name: "all good", args: []string{"--entryPoints.db.address=:5432"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, want := tc.args, tc.want
			if tc.file != nil {
				path := tc.file(t)
				args = append([]string{"--configFile=" + path}, args...)
				want = strings.ReplaceAll(want, "FILE", path)
			}
			if got := staticError(t, tc.env, args...); got != want {
				t.Errorf("error\n  %s\nwant\n  %s", got, want)
			}
		})
	}
}

// --log.level DEBUG (a space, not '=') is read as Traefik's flag parser
// reads it: the level is DEBUG.
func TestFlagValueAfterASpace(t *testing.T) {
	cmd := config.NewCommand()
	saved := os.Args
	os.Args = []string{"tollgate", "--entryPoints.db.address=:5432", "--log.level", "DEBUG", "--log.format", "json", "--ping"}
	defer func() { os.Args = saved }()
	if line := execute(Root(cmd, os.Environ(), func(Start) error { return cmd.Static.Validate() }, "test")); line != "" {
		t.Fatal(line)
	}
	if cmd.Log.Level != "DEBUG" || cmd.Log.Format != "json" || cmd.Ping == nil || cmd.EntryPoints["db"].Address != ":5432" {
		t.Fatalf("log %+v, ping %v, db %+v", cmd.Log, cmd.Ping, cmd.EntryPoints["db"])
	}
}

// A top-level key of the configuration file that names no option (a typo,
// entryPointz) is skipped, as Traefik skips it, and given to run to be
// warned about with its file and line: the configuration starts. A nested
// one is an error naming file and line (TestStaticErrorsNameTheirSource).
func TestUnknownTopLevelKeysAreReported(t *testing.T) {
	for _, tc := range []struct{ name, content string }{
		{"tollgate.yml", "entryPoints:\n  db:\n    address: \":5432\"\nentryPointz:\n  web:\n    address: \":80\"\nlog:\n  level: INFO\n"},
		{"tollgate.toml", "[entryPoints.db]\n  address = \":5432\"\n\n[entryPointz.web]\n  address = \":80\"\n[log]\n  level = \"INFO\"\n"},
	} {
		path := itest.WriteFile(t, tc.name, tc.content)
		line, start := runStart(t, nil, "--configFile="+path)
		if line != "" {
			t.Fatalf("%s: error %q, want the configuration to start", tc.name, line)
		}
		want := []UnknownKey{{File: path, Key: "entryPointz", Line: 4}}
		if fmt.Sprint(start.UnknownKeys) != fmt.Sprint(want) {
			t.Errorf("%s: unknown keys %v, want %v", tc.name, start.UnknownKeys, want)
		}
		if got := start.UnknownKeys[0].String(); got != path+":4: entryPointz: unknown top-level key, skipped: it names no option (see tollgate --help)" {
			t.Errorf("%s: %q", tc.name, got)
		}
	}
}

// Without --configFile, a traefik.yml where Traefik looks for it (here the
// working directory) is read, after tollgate's own places.
func TestTraefikConfigFileIsFound(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, "traefik.yml"), []byte("entryPoints:\n  db:\n    address: \"5432\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := staticError(t, nil); !strings.Contains(got, `traefik.yml:3: entryPoints.db.address="5432": not [host]:port`) {
		t.Fatalf("error %q, want the traefik.yml read and its line named", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "tollgate.yml"), []byte("entryPoints:\n  db:\n    address: \":5432\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := staticError(t, nil); got != "" {
		t.Fatalf("error %q, want tollgate.yml read first (it is good)", got)
	}
}

// `tollgate check --static` reads the static configuration from the same
// sources as a start (here flags, one bad: named as a start names it) and
// runs with Start.CheckOnly.
func TestCheckStatic(t *testing.T) {
	line, start := runStart(t, nil, "check", "--static", "--entryPoints.db.address=:5432", "--log.level", "DEBUG")
	if line != "" || !start.CheckOnly {
		t.Fatalf("error %q, CheckOnly %v", line, start.CheckOnly)
	}
	if line, _ := runStart(t, nil, "check", "--static", "--entryPoints.db.adress=:5432"); line != `flag --entryPoints.db.adress=":5432": unknown option "adress" (see tollgate --help)` {
		t.Fatalf("error %q", line)
	}
	if _, start := runStart(t, nil, "--entryPoints.db.address=:5432"); start.CheckOnly {
		t.Fatal("a start is CheckOnly")
	}
}
