package cmdline

import (
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
	var ignored []IgnoredVariable
	line := execute(Root(cmd, func(ig []IgnoredVariable) error {
		ignored = ig
		return cmd.Static.Validate()
	}, "test"))
	return line, ignored
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
		{name: "only unknown roots", env: with(map[string]string{"TRAEFIK_EXPERIMENTAL_PLUGINS_X_VERSION": "v1"}),
			want: map[string]string{"TRAEFIK_EXPERIMENTAL_PLUGINS_X_VERSION": "names no option"},
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
