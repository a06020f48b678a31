package cmdline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/traefik/paerser/cli"

	"github.com/tollgate-proxy/tollgate/config"
)

// upgradeTimeout bounds `tollgate upgrade`: the running process gives the
// new one 30 s to load its configuration and answers within 75 s.
const upgradeTimeout = 90 * time.Second

// Upgrade is `tollgate upgrade`: POST /api/upgrade on the admin API of the
// configuration given the same way as to tollgate itself (found as
// `tollgate healthcheck` finds it), with the token of its
// api.upgradeTokenFile. It prints the new process's PID and generation and
// exits 0, or prints why the upgrade failed or was refused (the running
// process serves on) and exits 1.
func Upgrade(environ []string) *cli.Command {
	cmd := config.NewCommand()
	return &cli.Command{
		Name:          "upgrade",
		Description:   "Upgrade the running tollgate in place: start the binary at its path again, hand over listeners and limiter counts, drain the old process.",
		Configuration: cmd,
		Resources:     (&sources{environ: environ}).loaders(),
		Run: func([]string) error {
			if cmd.API == nil {
				fmt.Fprintln(os.Stderr, "tollgate upgrade: the configuration has no admin API (--api), which the upgrade command talks to: send SIGUSR2 to the process instead")
				os.Exit(1)
			}
			if err := cmd.ResolveInsecureAPI(); err != nil { // api.insecure: where the API is
				return err
			}
			addr := config.DefaultAPIAddress
			if cmd.API.Address != "" {
				addr = cmd.API.Address
			}
			token, err := cmd.API.UpgradeToken()
			if err != nil {
				fmt.Fprintln(os.Stderr, "tollgate upgrade: "+err.Error())
				os.Exit(1)
			}
			out, err := postUpgrade(addr, token)
			if err != nil {
				fmt.Fprintln(os.Stderr, "tollgate upgrade: "+err.Error())
				os.Exit(1)
			}
			fmt.Println(out)
			return nil
		},
	}
}

// postUpgrade asks the admin API at addr for an upgrade, with token when
// there is one, and returns the outcome as one line.
func postUpgrade(addr, token string) (string, error) {
	url, err := adminURL(addr, "/api/upgrade")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), upgradeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return "", fmt.Errorf("%s", e.Message)
		}
		return "", fmt.Errorf("POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		PID, PreviousPID int
		Generation       uint64
		Connections      int64
		Keys             int64
		Unrouted         int64
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return "", fmt.Errorf("POST %s: %w", url, err)
	}
	out := fmt.Sprintf("upgraded: PID %d (generation %d) serves; PID %d drains; %d connections of %d clients handed over",
		r.PID, r.Generation, r.PreviousPID, r.Connections, r.Keys)
	if r.Unrouted > 0 {
		out += fmt.Sprintf("; %d not yet routed moved to it", r.Unrouted)
	}
	return out, nil
}
