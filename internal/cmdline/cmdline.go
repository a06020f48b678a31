// Package cmdline is tollgate's command line: the sources of the static
// configuration (a config file, flags, TOLLGATE_* variables, in that order
// of precedence) written once for every command that reads it, one-line
// errors that name where a bad option was written (the flag, the variable,
// the file and line), and the version, healthcheck, upgrade and demo subcommands.
// main.go gives it the function that runs the proxy; `tollgate check` is the
// check package's own command.
package cmdline

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"

	"github.com/traefik/paerser/cli"
	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
)

// Root returns the tollgate command: it decodes the static configuration
// into cmd and calls run. It has the version, healthcheck and demo
// subcommands; add others with AddCommand. An error about the static
// configuration names where it was written: the flag, the TOLLGATE_
// variable, or the configuration file and line. run is given the TOLLGATE_
// and TRAEFIK_ variables that configure nothing, to log.
func Root(cmd *config.Command, run func(ignored []IgnoredVariable) error, version string) *cli.Command {
	src := &sources{}
	root := &cli.Command{
		Name:          "tollgate",
		Description:   "TCP edge proxy: Traefik-style labels and tags, per-client-IP connection limits.",
		Configuration: cmd,
		Resources:     src.loaders(),
		Run:           func([]string) error { return src.name(run(src.ignored(os.Environ()))) },
	}
	_ = root.AddCommand(&cli.Command{
		Name:        "version",
		Description: "Print the version.",
		Run: func([]string) error {
			fmt.Printf("tollgate %s\n%s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	})
	_ = root.AddCommand(Healthcheck())
	_ = root.AddCommand(Upgrade())
	_ = root.AddCommand(Demo(cmd, run, src))
	return root
}

// Execute runs root with the process's arguments and returns the exit
// status. Flags given to tollgate itself are first decoded one by one, so
// that a bad one is reported as one line naming it; any error is printed as
// one line on stderr.
func Execute(root *cli.Command) int {
	// A leading "traefik" word is dropped, as the Traefik image's entry
	// point does: `command: ["traefik", "--providers.docker"]` in a compose
	// file written for Traefik runs tollgate with those flags.
	if len(os.Args) > 1 && os.Args[1] == "traefik" {
		os.Args = append(os.Args[:1:1], os.Args[2:]...)
	}
	if line := execute(root); line != "" {
		fmt.Fprintln(os.Stderr, "tollgate: "+line)
		return 1
	}
	return 0
}

// execute runs root with os.Args and returns its error as one line, or "".
func execute(root *cli.Command) string {
	flags := os.Args[1:]
	if len(flags) > 0 && flags[0] == "demo" {
		flags = flags[1:] // tollgate's own flags, after the subcommand
	}
	if len(flags) > 0 && strings.HasPrefix(flags[0], "-") {
		if err := ValidateFlags(flags); err != nil {
			return oneLine(err.Error())
		}
	}
	if err := cli.Execute(root); err != nil {
		return ErrorLine(err)
	}
	return ""
}

// ValidateFlags decodes each flag on its own before paerser decodes them all,
// so that a bad flag is reported as one line naming the flag and its value
// (paerser alone says "field not found, node: adress").
func ValidateFlags(args []string) error {
	for _, arg := range args {
		if arg == "--help" || arg == "-help" || arg == "-h" {
			return nil
		}
		if !strings.HasPrefix(arg, "-") {
			return fmt.Errorf("unexpected argument %q: give values with '=', as in --entryPoints.db.address=:5432", arg)
		}
		one := []string{arg}
		name, value, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if strings.EqualFold(name, "configFile") {
			if _, err := os.Stat(value); err != nil {
				return fmt.Errorf("--configFile=%q: %w", value, err)
			}
			continue
		}
		if err := flag.Decode(one, config.NewCommand()); err != nil {
			return fmt.Errorf("flag --%s=%q: %s", name, value, explain(name, err))
		}
	}
	return nil
}

// explain says what is wrong with the option key (dotted, as written):
// unknown, or a value that does not parse (what was expected).
func explain(key string, err error) string {
	if k, ok := decodeerr.UnknownField(err); ok {
		return fmt.Sprintf("unknown option %q (see tollgate --help)", k)
	}
	if msg, ok := decodeerr.Value(decodeerr.Last(key), err); ok {
		return msg
	}
	msg := err.Error()
	if strings.Contains(msg, "flag needs an argument") {
		return "unknown flag (see tollgate --help)"
	}
	return msg
}

var commandPrefix = regexp.MustCompile(`^command \S+ error: (failed to decode configuration from [a-z ]+: )?`)

// ErrorLine is err on one line without paerser's "command tollgate error: "
// wrapper.
func ErrorLine(err error) string {
	return oneLine(commandPrefix.ReplaceAllString(err.Error(), ""))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
