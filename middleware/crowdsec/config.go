package crowdsec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
)

// Key is the key a crowdSec block is written under
// (tcp.middlewares.<name>.crowdSec); every error and warning names its
// field below it.
const Key = "crowdSec"

// Config is a crowdSec block: where the CrowdSec Local API is and how to
// reach it (its fields: config.TCPCrowdSec, where every reader of the
// configuration finds it; Redacted is how it is shown). The zero value is
// not valid (it names no LAPI).
type Config = config.TCPCrowdSec

// ClientTLS is how the bouncer reaches an https:// LAPI: files in PEM.
type ClientTLS = config.TCPCrowdSecTLS

// DefaultUpdateInterval is the pull interval of a block that sets none
// (CrowdSec's firewall bouncer's default).
const DefaultUpdateInterval = 10 * time.Second

// Failure modes.
const (
	FailClosed = "closed"
	FailOpen   = "open"
)

// settings is a validated Config.
type settings struct {
	url      *url.URL // with the stream path
	key      string   // inline key, or ""
	keyFile  string
	interval time.Duration
	failOpen bool
	tls      *ClientTLS
}

func fieldErr(field, format string, args ...any) error {
	return config.FieldErrorf(field, "%s: "+format, append([]any{field}, args...)...)
}

// validate is the one rule for a crowdSec block: every reader reaches it
// through New. It does no I/O. Errors and warnings are *config.FieldError
// naming the field (crowdSec.lapiURL); the first error is returned.
func validate(cfg *Config) (*settings, []error, error) {
	var warns []error
	s := &settings{interval: DefaultUpdateInterval}
	if strings.TrimSpace(cfg.LapiURL) == "" {
		return nil, nil, fieldErr(Key+".lapiURL", "no Local API: set the LAPI's URL (http://127.0.0.1:8080 for a default CrowdSec install)")
	}
	u, err := url.Parse(cfg.LapiURL)
	switch {
	case err != nil:
		return nil, nil, fieldErr(Key+".lapiURL", "%s does not parse as a URL", short(cfg.LapiURL))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, nil, fieldErr(Key+".lapiURL", "%s: the scheme must be http or https", short(cfg.LapiURL))
	case u.Host == "" || u.Hostname() == "":
		return nil, nil, fieldErr(Key+".lapiURL", "%s has no host", short(cfg.LapiURL))
	case u.User != nil:
		return nil, nil, fieldErr(Key+".lapiURL", "%s has user information: the LAPI authenticates bouncers by apiKey or a client certificate", short(u.Redacted()))
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, nil, fieldErr(Key+".lapiURL", "%s has a query or fragment: give the LAPI's base URL", short(cfg.LapiURL))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, nil, fieldErr(Key+".lapiURL", "%s: port %s is not 1..65535", short(cfg.LapiURL), p)
		}
	}
	su := *u
	su.Path = strings.TrimSuffix(u.Path, "/") + "/v1/decisions/stream"
	su.RawPath = ""
	s.url = &su

	certAuth := cfg.TLS != nil && cfg.TLS.Cert != "" && cfg.TLS.Key != ""
	switch {
	case cfg.APIKey != "" && cfg.APIKeyFile != "":
		return nil, nil, fieldErr(Key+".apiKeyFile", "both apiKey and apiKeyFile are set: keep one")
	case cfg.APIKey != "":
		if strings.TrimSpace(cfg.APIKey) != cfg.APIKey || strings.ContainsFunc(cfg.APIKey, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			return nil, nil, fieldErr(Key+".apiKey", "the key holds spaces or characters an HTTP header cannot carry (its %d bytes are not shown)", len(cfg.APIKey))
		}
		s.key = cfg.APIKey
	case cfg.APIKeyFile != "":
		if strings.IndexByte(cfg.APIKeyFile, 0) >= 0 || strings.TrimSpace(cfg.APIKeyFile) == "" {
			return nil, nil, fieldErr(Key+".apiKeyFile", "%s is not a file path", short(cfg.APIKeyFile))
		}
		s.keyFile = cfg.APIKeyFile
	case !certAuth:
		return nil, nil, fieldErr(Key+".apiKey", "no credentials: set apiKey or apiKeyFile (cscli bouncers add <name>), or tls.cert and tls.key")
	}

	if d := cfg.UpdateInterval; d != nil {
		iv := time.Duration(*d)
		switch {
		case iv <= 0:
			return nil, nil, fieldErr(Key+".updateInterval", "%s is not positive (leave it out for %s)", iv, DefaultUpdateInterval)
		case iv < time.Second:
			warns = append(warns, fieldErr(Key+".updateInterval", "%s: the LAPI is asked more than once a second", iv))
		case iv > time.Hour:
			warns = append(warns, fieldErr(Key+".updateInterval", "%s: a ban or its lifting takes up to that long to apply", iv))
		}
		s.interval = iv
	}
	switch strings.ToLower(cfg.FailureMode) {
	case "", FailClosed:
	case FailOpen:
		s.failOpen = true
	default:
		return nil, nil, fieldErr(Key+".failureMode", "%s is not open or closed", short(cfg.FailureMode))
	}
	if t := cfg.TLS; t != nil {
		if u.Scheme != "https" {
			return nil, nil, fieldErr(Key+".tls", "tls is set but lapiURL %s is http://: use https://", short(cfg.LapiURL))
		}
		if (t.Cert == "") != (t.Key == "") {
			if t.Cert == "" {
				return nil, nil, fieldErr(Key+".tls.cert", "tls.key is set without tls.cert: set both or neither")
			}
			return nil, nil, fieldErr(Key+".tls.key", "tls.cert is set without tls.key: set both or neither")
		}
		if t.InsecureSkipVerify {
			warns = append(warns, fieldErr(Key+".tls.insecureSkipVerify", "the LAPI's certificate is not verified: anyone on the path can lift every ban"))
		}
		s.tls = t
	}
	if u.Scheme == "http" && s.keyFile+s.key != "" {
		if h := u.Hostname(); h != "localhost" && !isLoopback(h) {
			warns = append(warns, fieldErr(Key+".lapiURL", "%s is http:// to another host: the API key travels in clear (use https://)", short(cfg.LapiURL)))
		}
	}
	return s, warns, nil
}

// tlsConfig reads the files s.tls names; each error is on its field and
// names the file.
func (s *settings) tlsConfig() (*tls.Config, error) {
	if s.url.Scheme != "https" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	t := s.tls
	if t == nil {
		return tc, nil
	}
	tc.InsecureSkipVerify = t.InsecureSkipVerify
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fieldErr(Key+".tls.ca", "reading %s: %v", short(t.CA), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fieldErr(Key+".tls.ca", "%s holds no PEM certificate", short(t.CA))
		}
		tc.RootCAs = pool
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fieldErr(Key+".tls.cert", "loading the client certificate %s with key %s: %v", short(t.Cert), short(t.Key), err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// apiKey is the key to send: the inline one, or the file's content without
// surrounding white space, read now.
func (s *settings) apiKey() (string, error) {
	if s.keyFile == "" {
		return s.key, nil
	}
	b, err := os.ReadFile(s.keyFile)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fieldErr(Key+".apiKeyFile", "reading %s: %v", short(s.keyFile), err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "", fieldErr(Key+".apiKeyFile", "%s holds no key on one line (%d bytes)", short(s.keyFile), len(b))
	}
	return k, nil
}

func isLoopback(host string) bool {
	return strings.HasPrefix(host, "127.") || host == "::1"
}

// short quotes a user input for a message, cut to 64 bytes.
func short(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
