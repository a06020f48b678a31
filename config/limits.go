package config

import "fmt"

// Limits bound what one configuration may hold, so that a runaway
// generator or a hostile file cannot take the proxy's memory: a
// configuration over a limit is refused with an error naming the limit, and
// the provider's last good configuration keeps serving
// (docs/performance.md, "Large configurations"). Zero fields take the
// defaults.
type Limits struct {
	MaxFileSize     int64 `description:"Largest dynamic file the file provider reads, in bytes (default 67108864: 64 MiB)." json:"maxFileSize,omitempty" toml:"maxFileSize,omitempty" yaml:"maxFileSize,omitempty" export:"true"`
	MaxRouters      int   `description:"Most TCP routers one provider's configuration may hold (default 200000)." json:"maxRouters,omitempty" toml:"maxRouters,omitempty" yaml:"maxRouters,omitempty" export:"true"`
	MaxRuleLength   int   `description:"Longest router rule, in bytes (default 4194304: 4 MiB)." json:"maxRuleLength,omitempty" toml:"maxRuleLength,omitempty" yaml:"maxRuleLength,omitempty" export:"true"`
	MaxSourceRanges int   `description:"Most source ranges in one ipAllowList (default 200000)." json:"maxSourceRanges,omitempty" toml:"maxSourceRanges,omitempty" yaml:"maxSourceRanges,omitempty" export:"true"`
}

// The default limits: ten times the largest configurations measured
// within the memory budget would be unsafe, so they are about twice them
// (100,000 routers, an allow list of 100,001 ranges, 27 MB of YAML).
const (
	DefaultMaxFileSize     = 64 << 20
	DefaultMaxRouters      = 200_000
	DefaultMaxRuleLength   = 4 << 20
	DefaultMaxSourceRanges = 200_000
)

// Resolved returns l with its zero fields set to the defaults (l may be
// nil).
func (l *Limits) Resolved() Limits {
	var r Limits
	if l != nil {
		r = *l
	}
	if r.MaxFileSize <= 0 {
		r.MaxFileSize = DefaultMaxFileSize
	}
	if r.MaxRouters <= 0 {
		r.MaxRouters = DefaultMaxRouters
	}
	if r.MaxRuleLength <= 0 {
		r.MaxRuleLength = DefaultMaxRuleLength
	}
	if r.MaxSourceRanges <= 0 {
		r.MaxSourceRanges = DefaultMaxSourceRanges
	}
	return r
}

// Check returns an error naming the first limit d goes over (routers,
// rule length, source ranges per allow list), nil when it is within them.
// l must be resolved.
func (l Limits) Check(d *Dynamic) error {
	if d == nil || d.TCP == nil {
		return nil
	}
	if n := len(d.TCP.Routers); n > l.MaxRouters {
		return fmt.Errorf("%d TCP routers, over limits.maxRouters (%d): the configuration is refused", n, l.MaxRouters)
	}
	for name, r := range d.TCP.Routers {
		if r != nil && len(r.Rule) > l.MaxRuleLength {
			return fmt.Errorf("router %q: rule of %d bytes, over limits.maxRuleLength (%d): the configuration is refused", name, len(r.Rule), l.MaxRuleLength)
		}
	}
	for name, m := range d.TCP.Middlewares {
		if m != nil && m.IPAllowList != nil && len(m.IPAllowList.SourceRange) > l.MaxSourceRanges {
			return fmt.Errorf("middleware %q: ipAllowList of %d source ranges, over limits.maxSourceRanges (%d): the configuration is refused", name, len(m.IPAllowList.SourceRange), l.MaxSourceRanges)
		}
	}
	return nil
}
