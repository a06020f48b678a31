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
	return execute(Root(cmd, func() error { return cmd.Static.Validate() }, "test"))
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
