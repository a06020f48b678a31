package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/traefik/paerser/cli"
)

// Command is `tollgate check [--entryPoints=a,b] [--exposedByDefault=false]
// [--prefix=traefik] FILE...`: it exits with Run's status.
func Command() *cli.Command {
	return &cli.Command{
		Name:        "check",
		Description: "Lint dynamic configuration (files, labels, compose, Consul definitions) without running the proxy.",
		CustomHelpFunc: func(w io.Writer, _ *cli.Command) error {
			_, err := io.WriteString(w, usage)
			return err
		},
		AllowArg: true,
		Run: func(args []string) error {
			code, err := Run(args, os.Stdout, os.Stderr)
			if err != nil {
				return err
			}
			if code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
}

const usage = `Usage: tollgate check [flags] FILE|DIR...

Lint dynamic configuration without running the proxy: YAML/TOML dynamic files (a directory
stands for its .yml/.yaml/.toml files), files of key=value labels, docker-compose and stack files
(labels: Docker containers; deploy.labels: Swarm services), Consul service definitions (.json), and
KV store dumps: ` + "`consul kv export`" + ` JSON, or lines of ` + "`key value`" + ` (traefik/tcp/routers/r/rule HostSNI(` + "`*`" + `)). Prints the resulting TCP configuration and every problem as
JSON on stdout, one line per problem on stderr; exits 1 when a problem would keep a router from
serving (warnings alone exit 0).

Flags:
  --entryPoints=a,b          entry points that exist (default: every one a router names)
  --exposedByDefault=false   as the Docker, Swarm and Consul providers' option: skip what lacks traefik.enable=true
  --prefix=traefik           the Consul Catalog tag prefix
  --rootKey=traefik          the KV stores' root key
  --kvProvider=kv            the store a dump of key value lines is from (consul, etcd, redis,
                             zookeeper): names are qualified @<it>; a consul kv export is @consul
`

// Run checks the files named in args with the flags there, writes the
// report as JSON to stdout and one line per problem to stderr, and returns
// the exit status: 1 when a problem would keep a router from serving. An
// error is a bad command line.
func Run(args []string, stdout, stderr io.Writer) (int, error) {
	opts := DefaultOptions()
	var files []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			files = append(files, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch strings.ToLower(name) {
		case "entrypoints":
			for _, ep := range strings.Split(value, ",") {
				if ep = strings.TrimSpace(ep); ep != "" {
					opts.EntryPoints = append(opts.EntryPoints, ep)
				}
			}
		case "exposedbydefault":
			b := true
			if hasValue {
				var err error
				if b, err = strconv.ParseBool(value); err != nil {
					return 1, fmt.Errorf("check: --exposedByDefault=%q: want true or false", value)
				}
			}
			opts.ExposedByDefault = b
		case "prefix":
			if value == "" {
				return 1, errors.New("check: --prefix needs a value, e.g. --prefix=traefik")
			}
			opts.Prefix = value
		case "rootkey":
			if value == "" {
				return 1, errors.New("check: --rootKey needs a value, e.g. --rootKey=traefik")
			}
			opts.RootKey = value
		case "kvprovider":
			if value == "" {
				return 1, errors.New("check: --kvProvider needs a value: consul, etcd, redis or zookeeper")
			}
			opts.KVProvider = value
		default:
			return 1, fmt.Errorf("check: unknown flag %q (see tollgate check --help)", a)
		}
	}
	if len(files) == 0 {
		return 1, errors.New("check: no file given: tollgate check FILE... (dynamic .yml/.toml, key=value labels, docker-compose.yml)")
	}
	rep := Files(files, opts)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rep); err != nil {
		return 1, err
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stderr, p.String())
	}
	if rep.Failed() {
		return 1, nil
	}
	return 0, nil
}
