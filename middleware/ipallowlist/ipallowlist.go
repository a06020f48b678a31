// Package ipallowlist admits only clients whose IP lies in a configured set of
// addresses and CIDR ranges.
package ipallowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/ratelog"
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
	l, _, err := ParseNotes(ranges)
	return l, err
}

// Note is a warning about one entry of a sourceRange that parses but may
// not mean what it reads as (host bits set, an IPv4-mapped range).
type Note struct {
	Index int
	Msg   string
}

// ParseNotes is Parse plus the notes on suspicious entries.
func ParseNotes(ranges []string) (*List, []Note, error) {
	if len(ranges) == 0 {
		return nil, nil, config.FieldErrorf("ipAllowList.sourceRange", "ipAllowList.sourceRange is empty: it would admit nobody")
	}
	var notes []Note
	l := &List{prefixes: make([]netip.Prefix, 0, len(ranges))}
	for i, r := range ranges {
		if strings.TrimSpace(r) == "" {
			return nil, nil, config.FieldErrorf(fmt.Sprintf("ipAllowList.sourceRange[%d]", i), "ipAllowList.sourceRange[%d] is empty (%q): a stray comma, or an empty list?", i, r)
		}
		p, note, err := config.ParsePrefixNote(r)
		if err != nil {
			return nil, nil, config.FieldErrorf(fmt.Sprintf("ipAllowList.sourceRange[%d]", i), "ipAllowList.sourceRange: %w", err)
		}
		if note != "" {
			notes = append(notes, Note{Index: i, Msg: "ipAllowList.sourceRange: " + note})
		}
		l.prefixes = append(l.prefixes, p)
	}
	return l, notes, nil
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

// New returns the middleware for an ipAllowList block, and notes on the
// entries that parse but may not mean what they read as (they apply as the
// notes say; the middleware shows status warning). c receives its counts (it
// may be nil).
func New(cfg *config.TCPIPAllowList, c *Counters) (tcp.Middleware, []Note, error) {
	if cfg == nil {
		return nil, nil, errors.New("ipAllowList: no configuration")
	}
	l, notes, err := ParseNotes(cfg.SourceRange)
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		c = &Counters{}
	}
	return func(next tcp.Handler) tcp.Handler {
		return &handler{list: l, next: next, counts: c}
	}, notes, nil
}

type handler struct {
	list   *List
	next   tcp.Handler
	counts *Counters
}

var _ tcp.Handler = (*handler)(nil)

func (h *handler) ServeTCP(c *tcp.Conn) {
	if a := c.Client.Addr(); !h.list.Contains(a) {
		h.counts.Denied.Add(1)
		gently, _ := h.counts.gently.Allow(ratelog.Addr(a))
		c.Refuse(tcp.Gently(gently))
		return
	}
	h.counts.Allowed.Add(1)
	h.next.ServeTCP(c)
}
