package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// EntryPoint accepts connections on one address and routes each through the
// table current at its accept. Tables are swapped atomically; a connection
// keeps the generation it was routed with.
type EntryPoint struct {
	name        string
	ln          *net.TCPListener
	table       atomic.Pointer[Table]
	readTimeout time.Duration
	grace       time.Duration
	trusted     []netip.Prefix // PROXY protocol senders to believe
	ppInsecure  bool
	ppEnabled   bool
	live        tracker
	noRoute     atomic.Uint64
	accepted    atomic.Uint64
	log         zerolog.Logger
	started     atomic.Bool
	done        chan struct{}
}

// NewEntryPoint binds the entry point's address. An address in use is an
// error naming the entry point and the address.
func NewEntryPoint(name string, cfg *config.EntryPoint, log zerolog.Logger) (*EntryPoint, error) {
	l, err := listenConfig.Listen(context.Background(), "tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("entry point %q cannot listen on %s: %w", name, cfg.Address, err)
	}
	ln := l.(*net.TCPListener)
	e := &EntryPoint{
		name: name,
		ln:   ln,
		log:  log.With().Str("entrypoint", name).Logger(),
		done: make(chan struct{}),
	}
	e.table.Store(emptyTable)
	if t := cfg.Transport; t != nil {
		if t.RespondingTimeouts != nil {
			e.readTimeout = time.Duration(t.RespondingTimeouts.ReadTimeout)
		}
		if t.LifeCycle != nil {
			e.grace = time.Duration(t.LifeCycle.GraceTimeOut)
		}
	}
	if pp := cfg.ProxyProtocol; pp != nil {
		e.ppEnabled = true
		e.ppInsecure = pp.Insecure
		for _, r := range pp.TrustedIPs {
			p, err := config.ParsePrefix(r)
			if err != nil {
				_ = ln.Close()
				return nil, fmt.Errorf("entryPoints.%s.proxyProtocol.trustedIPs: %w", name, err)
			}
			e.trusted = append(e.trusted, p)
		}
	}
	return e, nil
}

// Name returns the entry point's name.
func (e *EntryPoint) Name() string { return e.name }

// Addr returns the bound address (useful with port 0).
func (e *EntryPoint) Addr() net.Addr { return e.ln.Addr() }

// Open returns the number of connections being served now.
func (e *EntryPoint) Open() int64 { return e.live.n.Load() }

// NoRoute returns how many connections matched no router.
func (e *EntryPoint) NoRoute() uint64 { return e.noRoute.Load() }

// Accepted returns how many connections were accepted.
func (e *EntryPoint) Accepted() uint64 { return e.accepted.Load() }

// SetTable makes t serve new connections. Live connections are untouched.
func (e *EntryPoint) SetTable(t *Table) {
	if t == nil {
		t = emptyTable
	}
	e.table.Store(t)
}

// Serve accepts until the listener is closed by Shutdown. Temporary accept
// errors (out of file descriptors, aborted handshakes) back off from 5 ms to
// 1 s and are logged; the loop never ends silently.
func (e *EntryPoint) Serve() error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("entry point " + e.name + " is already serving")
	}
	defer close(e.done)
	var backoff time.Duration
	for {
		conn, err := e.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff *= 2; backoff > time.Second {
				backoff = time.Second
			}
			e.log.Error().Err(err).Dur("retry_in", backoff).Msg("accept failed")
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		e.accepted.Add(1)
		t := e.table.Load()
		if e.ppEnabled || t.peek {
			go e.serve(conn, t) // reads from the client first: never on the accept loop
		} else {
			e.serve(conn, t) // routing and middlewares never block; the service runs async
		}
	}
}

// serve routes one connection with table t. It returns once the connection is
// rejected or handed to its service.
func (e *EntryPoint) serve(conn *net.TCPConn, t *Table) {
	c := &tcp.Conn{TCP: conn, EntryPoint: e.name}
	c.Client = addrPort(conn.RemoteAddr())
	c.Local = addrPort(conn.LocalAddr())
	e.live.add(c)

	if e.ppEnabled && !e.readProxyHeader(c) {
		c.Reject()
		return
	}
	if t.peek && !e.peekHello(c) {
		c.Reject()
		return
	}
	r := t.match(c)
	if r == nil {
		e.noRoute.Add(1)
		c.Reject()
		return
	}
	c.Router = r.name
	r.open.Add(1)
	c.Defer(r)
	r.handler.ServeTCP(c)
}

// readProxyHeader reads the PROXY protocol header a client sends first, under
// the read deadline. From a trusted sender (any sender with insecure) the
// header's source and destination become c.Client and c.Local, so that
// inFlightConn, ipAllowList and ClientIP key on the real client. From anyone
// else the header is read and dropped and the socket peer stays the client, as
// with Traefik's IGNORE policy: an untrusted header never reaches a backend.
// Bytes read past the header go to c.Peeked. A client that sends nothing
// before the deadline is served as one without a header (in some protocols the
// server speaks first); a malformed or unfinished header closes it.
func (e *EntryPoint) readProxyHeader(c *tcp.Conn) bool {
	if e.readTimeout > 0 {
		_ = c.TCP.SetReadDeadline(time.Now().Add(e.readTimeout))
	}
	trusted := e.ppInsecure || prefixesContain(e.trusted, c.Client.Addr())
	err := parseProxyHeader(c.TCP, c, trusted)
	_ = c.TCP.SetReadDeadline(time.Time{})
	if err != nil {
		e.log.Debug().Err(err).Str("client_ip", c.Client.Addr().String()).Bool("trusted", trusted).Msg("bad PROXY protocol header")
		return false
	}
	return true
}

// parseProxyHeader reads an optional PROXY header (v1 or v2) from src, applies
// it to c when trusted, and appends the bytes read past it to c.Peeked.
func parseProxyHeader(src io.Reader, c *tcp.Conn, trusted bool) error {
	br := bufio.NewReaderSize(src, 512)
	h, err := proxyproto.Read(br)
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		c.Peeked = append(c.Peeked, b...)
	}
	var ne net.Error
	switch {
	case err == nil:
	case errors.Is(err, proxyproto.ErrNoProxyProtocol):
		return nil // a client without a header: its first bytes are in c.Peeked
	case errors.As(err, &ne) && ne.Timeout() && len(c.Peeked) == 0:
		return nil // silent until the deadline: no header
	default:
		return err
	}
	if !trusted || h.Command.IsLocal() {
		return nil // LOCAL: the sender's own connection (a health check)
	}
	from, ok := h.SourceAddr.(*net.TCPAddr)
	to, ok2 := h.DestinationAddr.(*net.TCPAddr)
	if ok && ok2 { // TCP over IPv4 or IPv6; UDP and UNIX keep the peer
		c.Client = unmapAP(from.AddrPort())
		c.Local = unmapAP(to.AddrPort())
	}
	return nil
}

// Shutdown stops accepting, lets live connections drain for the grace
// timeout (or until ctx ends), then closes what is left.
func (e *EntryPoint) Shutdown(ctx context.Context) {
	_ = e.ln.Close()
	if e.started.Load() {
		<-e.done
	}
	if e.grace > 0 {
		timer := time.NewTimer(e.grace)
		defer timer.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	wait:
		for e.live.n.Load() > 0 {
			select {
			case <-ctx.Done():
				break wait
			case <-timer.C:
				break wait
			case <-tick.C:
			}
		}
	}
	e.live.closeAll()
}

// Client keepalive: a client that vanishes without a FIN or RST (a NAT that
// forgot it, a host that lost power) would hold its inFlightConn slot for
// ever. Probes after 30 s idle, every 15 s, 4 unanswered: freed within ~90 s.
const (
	keepAliveIdle     = 30
	keepAliveInterval = 15
	keepAliveCount    = 4
)

// listenConfig sets keepalive once on the listening socket: Linux copies it
// to every accepted socket, which saves Go's four setsockopt calls per
// accepted connection (KeepAlive -1 turns those off).
var listenConfig = net.ListenConfig{
	KeepAlive: -1,
	Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range [][3]int{
				{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
				{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
			} {
				if serr == nil {
					serr = syscall.SetsockoptInt(int(fd), o[0], o[1], o[2])
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	},
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return unmapAP(ta.AddrPort())
	}
	return netip.AddrPort{}
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// tracker knows an entry point's live connections, so shutdown can close the
// ones that outlive the drain. It is sharded so accepts rarely contend; each
// shard is the tcp.Finisher that forgets the connection when it ends.
type tracker struct {
	n      atomic.Int64
	rr     atomic.Uint32
	shards [16]trackShard
}

type trackShard struct {
	mu sync.Mutex
	m  map[*tcp.Conn]struct{}
	t  *tracker
}

func (t *tracker) add(c *tcp.Conn) {
	s := &t.shards[t.rr.Add(1)%uint32(len(t.shards))]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*tcp.Conn]struct{})
		s.t = t
	}
	s.m[c] = struct{}{}
	s.mu.Unlock()
	t.n.Add(1)
	c.Defer(s)
}

// Finish forgets c.
func (s *trackShard) Finish(c *tcp.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
	s.t.n.Add(-1)
}

func (t *tracker) closeAll() {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for c := range s.m {
			_ = c.TCP.Close()
		}
		s.mu.Unlock()
	}
}
