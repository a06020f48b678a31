package check

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/traefik/paerser/cli"

	"github.com/tollgate-proxy/tollgate/config"
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
			lowerGC()
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

// checkGCPercent is the garbage collector's GOGC for the `tollgate check`
// process: it builds one configuration and exits, and with the default 100
// its heap grew to twice what was alive (a file of 100,000 routers with
// their services and middlewares: 350 MB alive, 560 MB of RSS;
// docs/performance.md, "Large configurations"). The collections this costs
// slow nothing else.
const checkGCPercent = 25

// lowerGC sets GOGC to checkGCPercent, unless the operator set it lower or
// off (GOGC=off, with GOMEMLIMIT).
func lowerGC() {
	if prev := debug.SetGCPercent(checkGCPercent); prev < 0 || prev < checkGCPercent {
		debug.SetGCPercent(prev)
	}
}

const usage = `Usage: tollgate check [flags] FILE|DIR...
       tollgate check --static [tollgate's flags, or its TOLLGATE_/TRAEFIK_ variables or --configFile]
           checks the static configuration as a start reads it (every Traefik option applied,
           ignored with a warning, or refused), prints its warnings, and exits: nothing starts

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
	// No private key in the report, whatever field it was written in:
	// writeReport writes each value in one Write, so that no key is cut
	// between two.
	stdout, stderr = config.RedactingWriter(stdout), config.RedactingWriter(stderr)
	if err := writeReport(stdout, rep); err != nil {
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
