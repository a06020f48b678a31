// Package ipallowlist admits only clients whose IP lies in a configured set of
// addresses and CIDR ranges.
package ipallowlist

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// List is a parsed sourceRange: prefixes precomputed once at compile time.
type List struct {
	prefixes []netip.Prefix
}

// Parse parses a sourceRange. An empty list, or any entry that does not parse,
// is an error naming the entry: the middleware (and so its routers) then fails
// closed instead of silently admitting or dropping part of the intent.
func Parse(ranges []string) (*List, error) {
	l, _, err := ParseWarnings(ranges)
	return l, err
}

// ParseWarnings is Parse plus a warning on each entry that parses but may
// not mean what it reads as (host bits set, an IPv4-mapped range), on its
// field (ipAllowList.sourceRange[i]).
func ParseWarnings(ranges []string) (*List, []middleware.Warning, error) {
	return parse(DefaultKey, ranges)
}

// DefaultKey is the key the middleware is configured under; its deprecated
// name is ipWhiteList (config.TCPMiddleware.AllowList).
const DefaultKey = "ipAllowList"

// parse is ParseWarnings for a list written under key (ipAllowList or
// ipWhiteList), which its errors and warnings name.
func parse(key string, ranges []string) (*List, []middleware.Warning, error) {
	if len(ranges) == 0 {
		return nil, nil, config.FieldErrorf(key+".sourceRange", "%s.sourceRange is empty: it would admit nobody", key)
	}
	var warns []middleware.Warning
	l := &List{prefixes: make([]netip.Prefix, 0, len(ranges))}
	field := func(i int) string { return fmt.Sprintf("%s.sourceRange[%d]", key, i) }
	for i, r := range ranges {
		if strings.TrimSpace(r) == "" {
			return nil, nil, config.FieldErrorf(field(i), "%s is empty (%q): a stray comma, or an empty list?", field(i), r)
		}
		p, note, err := config.ParsePrefixNote(r)
		if err != nil {
			return nil, nil, config.FieldErrorf(field(i), "%s.sourceRange: %w", key, err)
		}
		if note != "" {
			warns = append(warns, middleware.Warning{Field: field(i), Message: key + ".sourceRange: " + note})
		}
		l.prefixes = append(l.prefixes, p)
	}
	return l, warns, nil
}

// Contains reports whether a (unmapped) is in the list.
func (l *List) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Counters counts an allow list's decisions; shared by every router using it.
type Counters struct {
	Allowed atomic.Uint64
	Denied  atomic.Uint64

	gently ratelog.Limiter // which denials are closed gently (see tcp.Conn.Refuse)
}

// New returns the middleware for the ipAllowList block named spec.Name
// (qualified), written under spec.Key (ipAllowList, or its deprecated name
// ipWhiteList, which errors and warnings then name), with a warning on each
// entry that parses but may not mean what it reads as (it applies as the
// warning says; the middleware shows status warning). It counts in the
// Keepers' Counters for its name (Lists), which are its Live.
func New(spec middleware.Spec, cfg *config.TCPIPAllowList) (middleware.Built, error) {
	key := cmp.Or(spec.Key, DefaultKey)
	if cfg == nil {
		return middleware.Built{}, fmt.Errorf("%s: no configuration", key)
	}
	l, warns, err := parse(key, cfg.SourceRange)
	if err != nil {
		return middleware.Built{}, err
	}
	c := Lists(spec.Keepers).Get(spec.Name)
	return middleware.Built{Middleware: func(next tcp.Handler) tcp.Handler {
		return &handler{list: l, next: next, counts: c, name: spec.Name}
	}, Live: c, Warnings: warns}, nil
}

type handler struct {
	list   *List
	next   tcp.Handler
	counts *Counters
	name   string // the middleware's, for the record of recent refusals
}

// whyDenied is what the record of recent refusals says of a denial.
const whyDenied = "client IP not in ipAllowList.sourceRange"

var _ tcp.Handler = (*handler)(nil)

func (h *handler) ServeTCP(c *tcp.Conn) {
	if a := c.Client.Addr(); !h.list.Contains(a) {
		h.counts.Denied.Add(1)
		gently, _ := h.counts.gently.Allow(ratelog.Addr(a))
		c.NoteRefusal(tcp.ReasonAllowList, h.name, whyDenied)
		c.Refuse(c.Gently(gently))
		return
	}
	h.counts.Allowed.Add(1)
	h.next.ServeTCP(c)
}
