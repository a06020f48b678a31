// Command tollgate is a TCP edge proxy: Traefik-style routing from Docker
// labels, Consul tags and files, with per-client-IP connection limits.
//
// main.go is wiring only: the command line (internal/cmdline) decodes the
// static configuration; `tollgate check` is package check's; a start is
// internal/process's life cycle (static configuration -> providers ->
// watcher -> proxy server; signals; shutdown), given here what it reads of
// the process's environment. No package below main reads a variable.
package main

import (
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	// Trusted roots when the system has none: the FROM scratch image has no
	// /etc/ssl/certs, and an ACME CA (Let's Encrypt), a Consul agent or a KV
	// store over https must still verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/tollgate-proxy/tollgate/check"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/internal/process"
	"github.com/tollgate-proxy/tollgate/internal/upgrade"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// processStart is when this process started (GET /api/version).
var processStart = time.Now()

func main() {
	// Before the command line is read: the variable is not configuration.
	handover, herr := upgrade.TakeEnv()
	cmd := config.NewCommand()
	root := cmdline.Root(cmd, os.Environ(), func(start cmdline.Start) error {
		if herr != nil {
			return herr
		}
		if start.CheckOnly {
			return check.Static(&cmd.Static, start, os.Stdout)
		}
		return run(&cmd.Static, handover, start)
	}, version())
	_ = root.AddCommand(check.Command())
	os.Exit(cmdline.Execute(root))
}

// run starts tollgate with the static configuration st. handover is the
// state channel's descriptor when an upgrade started this process, else
// -1; start is what the command line found about its sources.
func run(st *config.Static, handover int, start cmdline.Start) error {
	// Now: argv[0] means what it meant at start.
	self, selfErr := upgrade.Resolve()
	// Signals are ours from the start: a SIGTERM that arrives while the
	// entry points start must begin a drain, not kill the process, and
	// SIGUSR1's and SIGUSR2's default action would end it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	return process.Run(process.Options{
		Static: st, Start: start, Handover: handover, Self: self, SelfErr: selfErr, Signals: sigs,
		Loops: spareP(), Refuse: tcp.ParseRefusePolicy(os.Getenv("TOLLGATE_REFUSE")),
		NotifySocket: os.Getenv("NOTIFY_SOCKET"), Stdout: os.Stdout, Version: Version, Started: processStart,
	})
}

// spareP gives the Go scheduler one P more than there will be event loops,
// and returns how many loops: one per CPU (GOMAXPROCS as the process found
// it). While a P is idle the runtime does not take a P from a loop blocked
// in epoll_wait and hand it to another thread, so the loop resumes on its
// own P (ARCHITECTURE.md, "A loop and the Go scheduler").
func spareP() int {
	n := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(n + 1)
	return n
}

func version() string {
	v := Version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
