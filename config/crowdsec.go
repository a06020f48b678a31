package config

import "encoding/json"

// TCPCrowdSec is a crowdSec middleware's block
// (tcp.middlewares.<name>.crowdSec): a bouncer of a CrowdSec Local API, and
// how to reach it (docs/reference/middlewares/crowdsec.md). The zero value
// is not valid (it names no LAPI); its values are middleware/crowdsec's to
// judge, in its constructor. Wherever a configuration is shown (the API,
// `tollgate check`), APIKey is REDACTED (MarshalJSON).
type TCPCrowdSec struct {
	// LapiURL is the Local API's base URL, http:// or https://
	// (http://127.0.0.1:8080 for a default CrowdSec install).
	LapiURL string `json:"lapiURL,omitempty" toml:"lapiURL,omitempty" yaml:"lapiURL,omitempty" export:"true"`
	// APIKey is the bouncer's key (cscli bouncers add <name>); APIKeyFile
	// reads it from a file instead, again at every pull (a rotated key
	// applies without a reload). One of them, unless tls.cert and tls.key
	// authenticate the bouncer.
	APIKey     string `json:"apiKey,omitempty" toml:"apiKey,omitempty" yaml:"apiKey,omitempty" loggable:"false"`
	APIKeyFile string `json:"apiKeyFile,omitempty" toml:"apiKeyFile,omitempty" yaml:"apiKeyFile,omitempty" export:"true"`
	// UpdateInterval is the time between two pulls of the decisions that
	// changed; nil means the middleware's default (10 s).
	UpdateInterval *Duration `json:"updateInterval,omitempty" toml:"updateInterval,omitempty" yaml:"updateInterval,omitempty" export:"true"`
	// FailureMode is what happens while no pull has succeeded since the
	// middleware started (the LAPI unreachable at start): "closed" (the
	// default) refuses every client, "open" admits them. Once a pull has
	// succeeded, an outage keeps the last decisions in both modes.
	FailureMode string `json:"failureMode,omitempty" toml:"failureMode,omitempty" yaml:"failureMode,omitempty" export:"true"`
	// TLS is how to reach an https:// LAPI: the CA that signs its
	// certificate, and a client certificate (which may stand for the key).
	TLS *TCPCrowdSecTLS `json:"tls,omitempty" toml:"tls,omitempty" yaml:"tls,omitempty" export:"true"`
}

// TCPCrowdSecTLS is how a crowdSec bouncer reaches an https:// LAPI: paths
// of PEM files.
type TCPCrowdSecTLS struct {
	// CA verifies the LAPI's certificate (the system's roots when empty).
	CA string `json:"ca,omitempty" toml:"ca,omitempty" yaml:"ca,omitempty" export:"true"`
	// Cert and Key are the bouncer's client certificate and key (both or
	// neither).
	Cert string `json:"cert,omitempty" toml:"cert,omitempty" yaml:"cert,omitempty" export:"true"`
	Key  string `json:"key,omitempty" toml:"key,omitempty" yaml:"key,omitempty" export:"true"`
	// InsecureSkipVerify does not verify the LAPI's certificate (tests only).
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" export:"true"`
}

// Redacted is c as it is shown: its APIKey, when set, is REDACTED. c is a
// copy; the caller's value is not modified.
func (c TCPCrowdSec) Redacted() TCPCrowdSec {
	if c.APIKey != "" {
		c.APIKey = Redacted
	}
	return c
}

// MarshalJSON writes c Redacted: JSON is how a configuration is shown (the
// admin API's answers, `tollgate check`'s report), so the key cannot reach
// one through a path that forgot to redact it. Nothing reads a
// configuration back from its JSON form.
func (c TCPCrowdSec) MarshalJSON() ([]byte, error) {
	type plain TCPCrowdSec // without this method
	return json.Marshal(plain(c.Redacted()))
}
