package cmdline

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/traefik/paerser/cli"

	"github.com/tollgate-proxy/tollgate/config"
)

// healthcheckTimeout bounds the whole health check: Docker's default
// HEALTHCHECK timeout is 30 s, a probe should answer in far less.
const healthcheckTimeout = 3 * time.Second

// Healthcheck is `tollgate healthcheck`: GET /ping on the admin API of the
// configuration given the same way as to tollgate itself (a file, flags,
// or the variables of environ); exit 0 when it answers 200, else 1. It is
// what Traefik's documented health check, ["CMD", "traefik",
// "healthcheck", "--ping"], runs in the image.
func Healthcheck(environ []string) *cli.Command {
	cmd := config.NewCommand()
	return &cli.Command{
		Name:          "healthcheck",
		Description:   "Exit 0 when the admin API of a running tollgate answers /ping, else 1.",
		Configuration: cmd,
		Resources:     (&sources{environ: environ}).loaders(),
		Run: func([]string) error {
			if err := cmd.ResolveInsecureAPI(); err != nil {
				return err
			}
			cmd.ResolveInternal()
			if err := ping(cmd.PingAddress()); err != nil {
				fmt.Fprintln(os.Stderr, "tollgate healthcheck: "+err.Error())
				os.Exit(1)
			}
			fmt.Println("OK")
			return nil
		},
	}
}

// adminURL is the URL of path on the admin listener at addr (a listen
// address: an empty or unspecified host means this host's loopback).
func adminURL(addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("api.address=%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// ping asks the admin API at addr (a listen address: an empty or unspecified
// host means this host's loopback) for /ping.
func ping(addr string) error {
	url, err := adminURL(addr, "/ping")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
