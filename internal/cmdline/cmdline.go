// Package cmdline is tollgate's command line: the sources of the static
// configuration (a config file, flags, TOLLGATE_* variables, in that order
// of precedence) written once for every command that reads it, one-line
// errors for bad flags, and the version and healthcheck subcommands. main.go
// gives it the function that runs the proxy; `tollgate check` is the check
// package's own command.
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
)

// Loaders are where a command that takes the static configuration reads it
// from: --configFile (else /etc/tollgate/tollgate.*, $HOME/.config/tollgate/
// tollgate.*, ./tollgate.*), else flags, else TOLLGATE_* variables. As in
// Traefik, the first source that has anything wins; they do not mix.
func Loaders() []cli.ResourceLoader {
	return []cli.ResourceLoader{
		&cli.FileLoader{ConfigFileFlag: "configFile", BasePaths: []string{"/etc/tollgate/tollgate", "$HOME/.config/tollgate", "./tollgate"}},
		&cli.FlagLoader{},
		&cli.EnvLoader{Prefix: "TOLLGATE_"},
	}
}

// Root returns the tollgate command: it decodes the static configuration
// into cmd and calls run. It has the version and healthcheck subcommands;
// add others with AddCommand.
func Root(cmd *config.Command, run func() error, version string) *cli.Command {
	root := &cli.Command{
		Name:          "tollgate",
		Description:   "TCP edge proxy: Traefik-style labels and tags, per-client-IP connection limits.",
		Configuration: cmd,
		Resources:     Loaders(),
		Run:           func([]string) error { return run() },
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
	return root
}

// Execute runs root with the process's arguments and returns the exit
// status. Flags given to tollgate itself are first decoded one by one, so
// that a bad one is reported as one line naming it; any error is printed as
// one line on stderr.
func Execute(root *cli.Command) int {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-") {
		if err := ValidateFlags(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "tollgate: "+oneLine(err.Error()))
			return 1
		}
	}
	if err := cli.Execute(root); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate: "+ErrorLine(err))
		return 1
	}
	return 0
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
			return fmt.Errorf("flag --%s=%q: %s", name, value, explain(err))
		}
	}
	return nil
}

var fieldNotFound = regexp.MustCompile(`field not found, node: (\S+)`)

func explain(err error) string {
	msg := err.Error()
	if m := fieldNotFound.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown option %q (see tollgate --help)", m[1])
	}
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
