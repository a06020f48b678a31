package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// What a configuration shows of its certificates and keys, wherever it is
// shown (the admin API, `tollgate check`'s report, error messages, logs):
// never a file's content and never a private key. The file provider reads
// the TLS files a configuration names into it (FileContent); what is shown
// is the path that was written, a fingerprint for PEM written inline, and
// REDACTED for a private key. RedactPrivateKeys is the net under all of it:
// a PEM private key block in any text, whatever field it came from.

// Redacted takes the place of a private key wherever a configuration is
// shown.
const Redacted = "REDACTED"

// fileMarker starts the line FileContent puts before a file's content.
const fileMarker = "tollgate-file: "

// pemBegin starts every PEM block.
const pemBegin = "-----BEGIN"

// maxPath bounds what is shown as a path: a longer value, or one of several
// lines, is no path (PATH_MAX is 4096).
const maxPath = 4096

// FileContent is the value the file provider puts in place of the path of a
// TLS file it read: the file's PEM content after one line of explanatory
// text (RFC 7468, section 5.2) naming the path as written. PEM readers
// (encoding/pem, crypto/tls, crypto/x509) skip text before the first block,
// so the proxy reads the content; Source and Shown read the path.
func FileContent(path string, content []byte) FileOrContent {
	return FileOrContent(fileMarker + strconv.Quote(path) + "\n" + string(content))
}

// FilePath returns the path FileContent put in v, and whether v holds one.
func (v FileOrContent) FilePath() (string, bool) {
	s := string(v)
	if !strings.HasPrefix(s, fileMarker) {
		return "", false
	}
	line, _, _ := strings.Cut(s[len(fileMarker):], "\n")
	path, err := strconv.Unquote(line)
	if err != nil {
		return "", false
	}
	return path, true
}

// Source names v in a message without its content: the path it was read
// from or names, "inline PEM" for PEM written in the configuration, or its
// size when it is neither a path nor PEM.
func (v FileOrContent) Source() string {
	if path, ok := v.FilePath(); ok {
		return path
	}
	s := string(v)
	switch {
	case strings.Contains(s, pemBegin):
		return "inline PEM"
	case len(s) > maxPath || strings.ContainsAny(s, "\r\n"):
		return fmt.Sprintf("a value of %d bytes that is neither a path nor PEM", len(s))
	}
	return s
}

// Shown is v as a configuration is shown: the path it was read from or
// names (as written), or for inline PEM "inline PEM: " and what its blocks
// are: certificates by SHA-256 fingerprint, a private key as REDACTED.
func (v FileOrContent) Shown() string {
	if _, ok := v.FilePath(); ok || !strings.Contains(string(v), pemBegin) {
		return v.Source()
	}
	return "inline PEM: " + pemSummary([]byte(v))
}

// pemSummary says what the PEM blocks in b are, without their content.
func pemSummary(b []byte) string {
	var parts []string
	certs, key := 0, false
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch {
		case strings.HasSuffix(blk.Type, "PRIVATE KEY"):
			if !key {
				parts = append(parts, "private key "+Redacted)
			}
			key = true
		case blk.Type == "CERTIFICATE":
			if certs == 0 {
				parts = append(parts, "certificate SHA256 "+Fingerprint(blk.Bytes))
			}
			certs++
		default:
			parts = append(parts, strings.ToLower(blk.Type))
		}
	}
	if certs > 1 {
		parts = append(parts, fmt.Sprintf("%d more certificates", certs-1))
	}
	if len(parts) == 0 {
		return "no block that decodes"
	}
	return strings.Join(parts, ", ")
}

// Fingerprint is a certificate's SHA-256 fingerprint as
// `openssl x509 -noout -fingerprint -sha256` prints it: upper-case hex
// bytes joined by colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

func redactPair(c Certificate) Certificate {
	c.CertFile = FileOrContent(c.CertFile.Shown())
	c.KeyFile = FileOrContent(c.KeyFile.Shown())
	return c
}

func shownList(l []FileOrContent) []FileOrContent {
	if l == nil {
		return nil
	}
	out := make([]FileOrContent, len(l))
	for i, v := range l {
		out[i] = FileOrContent(v.Shown())
	}
	return out
}

// RedactTLS returns a copy of t as it is shown (nil for nil): every
// certificate, key and CA as Shown. t is not modified.
func RedactTLS(t *TLSConfiguration) *TLSConfiguration {
	if t == nil {
		return nil
	}
	out := *t
	out.Certificates = make([]*CertAndStores, 0, len(t.Certificates))
	for _, c := range t.Certificates {
		if c == nil {
			continue
		}
		cp := *c
		cp.Certificate = redactPair(c.Certificate)
		out.Certificates = append(out.Certificates, &cp)
	}
	if t.Options != nil {
		out.Options = make(map[string]TLSOptions, len(t.Options))
		for n, o := range t.Options {
			o.ClientAuth.CAFiles = shownList(o.ClientAuth.CAFiles)
			out.Options[n] = o
		}
	}
	if t.Stores != nil {
		out.Stores = make(map[string]TLSStore, len(t.Stores))
		for n, st := range t.Stores {
			if st.DefaultCertificate != nil {
				c := redactPair(*st.DefaultCertificate)
				st.DefaultCertificate = &c
			}
			out.Stores[n] = st
		}
	}
	return &out
}

// RedactTransports returns copies of the servers transports as they are
// shown: their root CAs and client certificates as Shown. m is not
// modified.
func RedactTransports(m map[string]*TCPServersTransport) map[string]*TCPServersTransport {
	if m == nil {
		return nil
	}
	out := make(map[string]*TCPServersTransport, len(m))
	for n, st := range m {
		if st != nil && st.TLS != nil && (len(st.TLS.Certificates) > 0 || len(st.TLS.RootCAs) > 0) {
			cp := *st
			tl := *st.TLS
			tl.RootCAs = shownList(st.TLS.RootCAs)
			if st.TLS.Certificates != nil {
				tl.Certificates = make([]Certificate, len(st.TLS.Certificates))
				for i, c := range st.TLS.Certificates {
					tl.Certificates[i] = redactPair(c)
				}
			}
			cp.TLS = &tl
			st = &cp
		}
		out[n] = st
	}
	return out
}

// privateKeyBlock is a PEM private key block (PKCS #1, #8, SEC 1, OpenSSH,
// encrypted, PGP) in plain text or inside a JSON string: from its BEGIN
// line to its END line, else to the end of the JSON string or the text. In
// JSON it never takes half an escape or the closing quote, so what is left
// stays valid JSON.
var privateKeyBlock = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:(?:[^"\\]|\\.)*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|(?:[^"\\]|\\.)*)`)

// privateKeyWord is in every private key block: text without it holds none.
var privateKeyWord = []byte("PRIVATE KEY")

// redactedKey takes the place of a private key block in text.
const redactedKey = Redacted + " private key"

// RedactPrivateKeys returns b with every PEM private key block in it
// replaced by "REDACTED private key": the net under what is shown (API
// answers, check's report, log lines), whatever field a key was written
// in. b is text or JSON; JSON stays valid. b itself is not modified.
func RedactPrivateKeys(b []byte) []byte {
	if !bytes.Contains(b, privateKeyWord) {
		return b
	}
	return privateKeyBlock.ReplaceAllLiteral(b, []byte(redactedKey))
}

// RedactingWriter returns a writer that passes what is written to w with
// its private key blocks redacted (RedactPrivateKeys). Each Write is
// redacted on its own: a log line, an encoded JSON value.
func RedactingWriter(w io.Writer) io.Writer { return redactingWriter{w} }

type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, privateKeyWord) {
		return r.w.Write(p)
	}
	if _, err := r.w.Write(RedactPrivateKeys(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
