package config

// TCPGeoIP is a geoIP middleware's block (tcp.middlewares.<name>.geoIP):
// which clients may connect, by where MaxMind-format databases place them
// (docs/reference/middlewares/geoip.md). The zero value is not valid (it
// names no database and no rule); its values are middleware/geoip's to
// judge, in its constructor.
type TCPGeoIP struct {
	// Databases are MaxMind-format (.mmdb) files: GeoLite2/GeoIP2 Country,
	// City or ASN, DB-IP Lite, or IPinfo's. An address's country, continent
	// and autonomous system are each taken from the first database that
	// has them (a Country database and an ASN database side by side).
	// Each file is watched: a replaced file applies without a restart.
	Databases []string `json:"databases,omitempty" toml:"databases,omitempty" yaml:"databases,omitempty" export:"true"`
	// AllowCountries, AllowContinents and AllowASNs admit the clients they
	// match; when any is set, a client none of them matches is refused.
	AllowCountries  []string `json:"allowCountries,omitempty" toml:"allowCountries,omitempty" yaml:"allowCountries,omitempty" export:"true"`
	AllowContinents []string `json:"allowContinents,omitempty" toml:"allowContinents,omitempty" yaml:"allowContinents,omitempty" export:"true"`
	AllowASNs       []string `json:"allowASNs,omitempty" toml:"allowASNs,omitempty" yaml:"allowASNs,omitempty" export:"true"`
	// DenyCountries, DenyContinents and DenyASNs refuse the clients they
	// match, before the allow lists are consulted: a deny wins.
	DenyCountries  []string `json:"denyCountries,omitempty" toml:"denyCountries,omitempty" yaml:"denyCountries,omitempty" export:"true"`
	DenyContinents []string `json:"denyContinents,omitempty" toml:"denyContinents,omitempty" yaml:"denyContinents,omitempty" export:"true"`
	DenyASNs       []string `json:"denyASNs,omitempty" toml:"denyASNs,omitempty" yaml:"denyASNs,omitempty" export:"true"`
	// Unknown is what happens to a client the databases say nothing about
	// that the rules consult: "allow" or "deny". Empty: "deny" when an allow
	// list is set, else "allow".
	Unknown string `json:"unknown,omitempty" toml:"unknown,omitempty" yaml:"unknown,omitempty" export:"true"`
	// Private is what happens to clients in private ranges (RFC 1918,
	// RFC 6598 shared space 100.64.0.0/10, link-local, IPv6 unique local
	// fc00::/7 and link-local fe80::/10), which public databases do not
	// place: "allow" (the default), "deny", or "lookup" (looked up like
	// any address, for a database of one's own that places them).
	Private string `json:"private,omitempty" toml:"private,omitempty" yaml:"private,omitempty" export:"true"`
	// Loopback is the same for 127.0.0.0/8 and ::1: "allow" (the default),
	// "deny" or "lookup".
	Loopback string `json:"loopback,omitempty" toml:"loopback,omitempty" yaml:"loopback,omitempty" export:"true"`
}
