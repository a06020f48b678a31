// Package cmdline is tollgate's command line: the sources of the static
// configuration (a config file, flags, TOLLGATE_* variables, in that order
// of precedence) written once for every command that reads it, one-line
// errors that name where a bad option was written (the flag, the variable,
// the file and line), and the version, healthcheck, upgrade and demo subcommands.
// main.go gives it the environment and the function that runs the proxy; `tollgate check` is the
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

// Start is what the command line gives the function that runs tollgate,
// besides the static configuration it decoded into its Command: what of
// the sources configures nothing, for the log at start, and whether this is
// `tollgate check --static`.
type Start struct {
	// Ignored are the TOLLGATE_ and TRAEFIK_ variables that configure
	// nothing.
	Ignored []IgnoredVariable
	// UnknownKeys are the top-level keys of the configuration file that
	// name no option: paerser skips them, as Traefik does, so they are
	// warned about (a typo such as entryPointz).
	UnknownKeys []UnknownKey
	// CheckOnly is `tollgate check --static`: check the static
	// configuration as a start would, report, and exit without starting.
	CheckOnly bool
}

// CheckStatic is the hidden command `tollgate check --static` runs as
// (Execute rewrites the one into the other): the root command's
// configuration and sources, run with Start.CheckOnly.
const CheckStatic = "check-static"

// Root returns the tollgate command: it decodes the static configuration
// into cmd, from the configuration file, the flags or the variables of
// environ (the process's environment, which main reads: os.Environ), and
// calls run. It has the version, healthcheck and demo
// subcommands, and check --static; add others with AddCommand. An error
// about the static configuration names where it was written: the flag, the
// TOLLGATE_ variable, or the configuration file and line.
func Root(cmd *config.Command, environ []string, run func(Start) error, version string) *cli.Command {
	src := &sources{environ: environ}
	root := &cli.Command{
		Name:          "tollgate",
		Description:   "TCP edge proxy: Traefik-style labels and tags, per-client-IP connection limits.",
		Configuration: cmd,
		Resources:     src.loaders(),
		Run:           func([]string) error { return src.name(run(src.start(false))) },
	}
	_ = root.AddCommand(&cli.Command{
		Name:          CheckStatic,
		Description:   "Check the static configuration (the same flags, variables or file) as tollgate reads it at start, print its warnings, and exit: tollgate check --static [flags].",
		Configuration: cmd,
		Resources:     src.loaders(),
		Hidden:        true,
		Run:           func([]string) error { return src.name(run(src.start(true))) },
	})
	_ = root.AddCommand(&cli.Command{
		Name:        "version",
		Description: "Print the version.",
		Run: func([]string) error {
			fmt.Printf("tollgate %s\n%s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	})
	_ = root.AddCommand(Healthcheck(environ))
	_ = root.AddCommand(Upgrade(environ))
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
	if len(os.Args) > 2 && os.Args[1] == "check" && os.Args[2] == "--static" {
		os.Args = append([]string{os.Args[0], CheckStatic}, os.Args[3:]...)
	}
	flags := os.Args[1:]
	if len(flags) > 0 && (flags[0] == "demo" || flags[0] == CheckStatic) {
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
// (paerser alone says "field not found, node: adress"). A flag's value is
// given after '=' or, as paerser (Traefik's parser) reads it, as the next
// argument for an option that is not a boolean or a block
// (--log.level DEBUG).
func ValidateFlags(args []string) error {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--help" || arg == "-help" || arg == "-h" {
			return nil
		}
		if !strings.HasPrefix(arg, "-") {
			if prev := ""; i > 0 {
				prev = args[i-1]
				if strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=") {
					// paerser reads a block, a boolean, or a name under a
					// map's name (entryPoints.<name>) as a flag of its own.
					return fmt.Errorf("unexpected argument %q after %s: give this option its value with '=' (%s=%s)", arg, prev, prev, arg)
				}
			}
			return fmt.Errorf("unexpected argument %q: give values with '=', as in --entryPoints.db.address=:5432", arg)
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && takesValue(name) {
			i++
			value, hasValue = args[i], true
		}
		if strings.EqualFold(name, "configFile") {
			if _, err := os.Stat(value); err != nil {
				return fmt.Errorf("--configFile=%q: %w", value, err)
			}
			continue
		}
		one := []string{"--" + name}
		if hasValue {
			one[0] += "=" + value
		}
		if err := flag.Decode(one, config.NewCommand()); err != nil {
			return fmt.Errorf("flag --%s=%q: %s", name, value, explain(name, err))
		}
	}
	return nil
}

// takesValue reports whether paerser reads the argument after the flag
// name as its value: the option is not a boolean or a block (which a bare
// flag sets to true).
func takesValue(name string) bool {
	_, err := flag.Parse([]string{"--" + name}, config.NewCommand())
	return err != nil && strings.Contains(err.Error(), "flag needs an argument")
}

// explain says what is wrong with the option key (dotted, as written):
// unknown, or a value that does not parse (what was expected).
func explain(key string, err error) string {
	if refused := config.RefusedOption(key); key != "" && refused != nil {
		return refused.Error() // an option of Traefik's that tollgate refuses, which may have no field
	}
	if k, ok := decodeerr.UnknownField(err); ok {
		return fmt.Sprintf("unknown option %q (see tollgate --help)", k)
	}
	if msg, ok := decodeerr.Value(decodeerr.Last(key), err); ok {
		return msg
	}
	msg := err.Error()
	if strings.Contains(msg, "flag needs an argument") {
		return fmt.Sprintf("a value is needed: --%s=VALUE or --%s VALUE (see tollgate --help)", key, key)
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
