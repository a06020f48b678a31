package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/traefik/paerser/flag"

	"github.com/tollgate-proxy/tollgate/config"
)

// checkArgs decodes each flag on its own before paerser decodes them all, so
// that a bad flag is reported as one line naming the flag and its value
// (paerser alone says "field not found, node: adress").
func checkArgs(args []string) error {
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

// cleanError strips paerser's "command tollgate error: " wrapper.
func cleanError(err error) string {
	return oneLine(commandPrefix.ReplaceAllString(err.Error(), ""))
}
