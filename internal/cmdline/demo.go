package cmdline

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/traefik/paerser/cli"

	"github.com/tollgate-proxy/tollgate/config"
)

// DemoBackendAddress is where `tollgate demo` runs its demo backend; the
// quickstart's dynamic configuration (testdata/quickstart-dynamic.yml)
// routes to it.
const DemoBackendAddress = "127.0.0.1:7001"

// Demo greetings, as the README's quickstart and
// docs/getting-started/quickstart.md quote them.
const (
	demoHello = "hello from the demo backend on " + DemoBackendAddress + "\n"
	demoHeld  = "held: this connection stays open until this curl is stopped\n"
)

// Demo is `tollgate demo`: tollgate as the root command runs it (the same
// static configuration, from the same sources), plus a demo backend on
// DemoBackendAddress for it to route to. The backend is a plain HTTP server
// without timeouts: `/hold` answers with one line and keeps the connection
// open until the client goes away, an idle connection is never closed, and
// every other path answers with one line (demoHello). So connections held
// through tollgate stay held however slowly the quickstart is typed, and
// the quickstart needs nothing but curl.
func Demo(cmd *config.Command, run func(Start) error, src *sources) *cli.Command {
	return &cli.Command{
		Name:          "demo",
		Description:   "Run tollgate, plus a demo backend on " + DemoBackendAddress + " (HTTP: /hold holds the connection until the client closes it, any other path greets). See the README's quickstart.",
		Configuration: cmd,
		Resources:     src.loaders(),
		Run: func([]string) error {
			stop, err := StartDemoBackend(DemoBackendAddress)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(os.Stderr, "demo backend listening on %s: /hold holds a connection until the client closes it, any other path answers one line\n", DemoBackendAddress)
			return src.name(run(src.start(false)))
		},
	}
}

// StartDemoBackend starts the demo backend on addr and returns the function
// that closes it and every connection it holds.
func StartDemoBackend(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo backend: cannot listen on %s: %w", addr, err)
	}
	return ServeDemoBackend(ln), nil
}

// ServeDemoBackend serves the demo backend on ln until the returned
// function is called; that closes ln and the connections held.
func ServeDemoBackend(ln net.Listener) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprint(w, demoHeld)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		<-r.Context().Done() // the client went away, or stop was called
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprint(w, demoHello)
	})
	srv := &http.Server{Handler: mux} //nolint:gosec // no timeouts: a demo backend that holds what the client holds
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "demo backend stopped: "+err.Error())
		}
	}()
	return func() {
		_ = srv.Close() // cancels the held requests' contexts
		<-done
	}
}
