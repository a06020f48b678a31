package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/traefik/paerser/cli"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// connObservers returns what closed connections report to: the access log
// (--accessLog) and per-router metrics (--metrics.prometheus). The access log
// file stays open until the process exits: connections cut by the shutdown
// drain end (and are logged) after Server.Shutdown returns. Each line is one
// unbuffered write, so nothing is lost at exit.
func connObservers(st *config.Static) (proxy.ConnObservers, error) {
	var o proxy.ConnObservers
	o.Metrics = st.Metrics != nil && st.Metrics.Prometheus != nil
	if st.AccessLog != nil {
		var w io.Writer = os.Stdout
		if path := st.AccessLog.FilePath; path != "" {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return o, fmt.Errorf("accessLog.filePath=%q: %w", path, err)
			}
			w = f
		}
		l := zerolog.New(w).With().Timestamp().Logger()
		o.AccessLog = &l
	}
	return o, nil
}

// healthcheckTimeout bounds the whole health check: Docker's default
// HEALTHCHECK timeout is 30 s, a probe should answer in far less.
const healthcheckTimeout = 3 * time.Second

// healthcheckCommand is `tollgate healthcheck`: GET /ping on the admin API of
// the configuration given the same way as to tollgate itself (flags,
// TOLLGATE_* variables, --configFile); exit 0 when it answers 200, else 1.
// It is what a FROM scratch image's HEALTHCHECK runs (there is no curl).
func healthcheckCommand() *cli.Command {
	cmd := config.NewCommand()
	return &cli.Command{
		Name:          "healthcheck",
		Description:   "Exit 0 when the admin API of a running tollgate answers /ping, else 1.",
		Configuration: cmd,
		Resources: []cli.ResourceLoader{
			&cli.FileLoader{ConfigFileFlag: "configFile", BasePaths: []string{"/etc/tollgate/tollgate", "$HOME/.config/tollgate", "./tollgate"}},
			&cli.FlagLoader{},
			&cli.EnvLoader{Prefix: "TOLLGATE_"},
		},
		Run: func([]string) error {
			addr := config.DefaultAPIAddress
			if cmd.API != nil && cmd.API.Address != "" {
				addr = cmd.API.Address
			}
			if err := ping(addr); err != nil {
				fmt.Fprintln(os.Stderr, "tollgate healthcheck: "+err.Error())
				os.Exit(1)
			}
			fmt.Println("OK")
			return nil
		},
	}
}

// ping asks the admin API at addr (a listen address: an empty or unspecified
// host means this host's loopback) for /ping.
func ping(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("api.address=%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	url := "http://" + net.JoinHostPort(host, port) + "/ping"
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
