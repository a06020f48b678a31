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
	if len(ranges) == 0 {
		return nil, config.FieldErrorf("ipAllowList.sourceRange", "ipAllowList.sourceRange is empty: it would admit nobody")
	}
	l := &List{prefixes: make([]netip.Prefix, 0, len(ranges))}
	for i, r := range ranges {
		if strings.TrimSpace(r) == "" {
			return nil, config.FieldErrorf(fmt.Sprintf("ipAllowList.sourceRange[%d]", i), "ipAllowList.sourceRange[%d] is empty (%q): a stray comma, or an empty list?", i, r)
		}
		p, err := config.ParsePrefix(r)
		if err != nil {
			return nil, config.FieldErrorf(fmt.Sprintf("ipAllowList.sourceRange[%d]", i), "ipAllowList.sourceRange: %w", err)
		}
		l.prefixes = append(l.prefixes, p)
	}
	return l, nil
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
}

// New returns the middleware for an ipAllowList block. c receives its counts
// (it may be nil).
func New(cfg *config.TCPIPAllowList, c *Counters) (tcp.Middleware, error) {
	if cfg == nil {
		return nil, errors.New("ipAllowList: no configuration")
	}
	l, err := Parse(cfg.SourceRange)
	if err != nil {
		return nil, err
	}
	if c == nil {
		c = &Counters{}
	}
	return func(next tcp.Handler) tcp.Handler {
		return &handler{list: l, next: next, counts: c}
	}, nil
}

type handler struct {
	list   *List
	next   tcp.Handler
	counts *Counters
}

var _ tcp.Handler = (*handler)(nil)

func (h *handler) ServeTCP(c *tcp.Conn) {
	if !h.list.Contains(c.Client.Addr()) {
		h.counts.Denied.Add(1)
		c.Reject()
		return
	}
	h.counts.Allowed.Add(1)
	h.next.ServeTCP(c)
}
