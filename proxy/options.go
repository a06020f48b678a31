package proxy

import (
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Options are what a Server is built with: everything the static
// configuration and the process decide about it, given once, at
// construction (NewServer). The zero value is a Server of its own: one
// loop per P, nothing inherited, Traefik's defaults, nothing logged.
type Options struct {
	// Log is where the server, its entry points and its compiles log.
	Log zerolog.Logger
	// Loops is how many event loops serve the connections; 0 is one per P
	// (GOMAXPROCS when NewServer runs). main runs one per CPU and gives
	// the Go scheduler one P more (ARCHITECTURE.md, "A loop and the Go
	// scheduler").
	Loops int
	// Inherited are the listening sockets an upgrade handed over, keyed by
	// the entry point that takes each over (its name here; the caller pairs
	// them, by name or by address: upgrade.Match): an entry point whose
	// address binds its socket's (ListenKey) is not bound again
	// (connections waiting in its queue are kept), any other is bound as
	// usual. The caller keeps the inherited sockets that Uses does not
	// report.
	Inherited map[string]Inherited
	// Refuse is how connections a limit refuses are closed
	// (tcp.Conn.Gently); the zero value is tollgate's.
	Refuse tcp.RefusePolicy
	// State is what the server's State is built with.
	State StateOptions
}

// StateOptions are what a State is built with (NewState): the parts of
// the static configuration a Compile reads besides the dynamic
// configuration, and what a predecessor handed over. The zero value is
// Traefik's defaults with no certificate resolver and no shared store.
type StateOptions struct {
	// Offline is for tollgate check: middlewares are judged, and read no
	// database, key or certificate and reach no store or LAPI
	// (middleware.Spec.Offline).
	Offline bool
	// DefaultTransport is the static configuration's tcpServersTransport:
	// the transport of the services that name none, and default@internal.
	// Nil leaves those services on Traefik's defaults
	// (TransportDialTimeout, TransportKeepAlive).
	DefaultTransport *config.TCPServersTransport
	// DefaultEntryPoints are the entry points marked asDefault: the
	// routers that name no entry point listen on those (on every entry
	// point when there are none).
	DefaultEntryPoints []string
	// ProviderPrecedence is Traefik's providers.precedence: of two routers
	// of equal priority on an entry point, the one whose provider (the
	// part of its name after "@") comes first here comes first; a provider
	// not named comes after those named; then by name, as without it.
	ProviderPrecedence []string
	// Observers are what closed connections report to (package accesslog).
	Observers ConnObservers
	// Stores are the shared stores of the static configuration, by name,
	// for the middlewares that name one (inFlightConn.store): the kinds'
	// state is made with them (middleware.NewKeepers).
	Stores map[string]middleware.Store
	// CertResolvers are the certificatesResolvers of the static
	// configuration, each with what obtains its certificates (nil: it has
	// no ACME challenge, and the routers naming it are served from the TLS
	// store, with a warning). A router naming another is disabled.
	CertResolvers map[string]CertResolver
	// CertResolverNames name certificatesResolvers whose ACME is not known
	// (tollgate check, which obtains nothing): a router naming one of them
	// is neither disabled nor warned about.
	CertResolverNames []string
	// Health is where the health checkers the first configuration starts
	// begin (a predecessor's, at an upgrade: a server DOWN there gets no
	// connection here before its first check passes) instead of UP.
	Health []HealthStatus
}
