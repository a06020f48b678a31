package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tollgate-proxy/tollgate/config"
)

// As Traefik's file provider does, the files a configuration names for
// TLS (certificates and keys, client CAs, a servers transport's root CAs
// and client certificates) are read when the configuration is, and their
// contents take the place of their paths (docs/reference/tls.md). So a rewritten
// certificate is a new configuration for the watcher, which applies what
// changed and nothing else, and the proxy serves what was read together
// with the rest of the file. The content goes in as config.FileContent,
// behind a line naming the path: what the API, `tollgate check` and the
// errors show of it is that path, never the content.
//
// A value that is already PEM (Traefik's inline content) is kept. A file
// that cannot be read, or that holds no PEM block (any readable file can be
// named there: its content must not reach the configuration, and from it
// the API and the log), is left as its path, with a problem naming it: the
// proxy then fails to load it and disables what needs it (fail closed), and
// the rest applies.

// pemMarker starts every PEM block; a value containing it is content, not
// a path.
const pemMarker = "-----BEGIN"

// TLSFileError is a TLS file a configuration names that could not be read.
type TLSFileError struct {
	// Key is where the file is named: "tls", "certificates", "1",
	// "keyFile" (a list index is a segment of digits).
	Key []string
	// Path is the file as written.
	Path string
	Err  error
}

// KeyString is Key as written in messages: tls.certificates[1].keyFile.
func (e TLSFileError) KeyString() string {
	var b strings.Builder
	for i, k := range e.Key {
		switch {
		case k != "" && strings.Trim(k, "0123456789") == "":
			b.WriteString("[" + k + "]")
		case i > 0:
			b.WriteString("." + k)
		default:
			b.WriteString(k)
		}
	}
	return b.String()
}

// errNotPEM is a TLS file without a PEM block. Its content is not said.
var errNotPEM = errors.New("no PEM block (-----BEGIN ...) in it: a certificate, key or CA file is PEM")

// Message is what went wrong, without the key.
func (e TLSFileError) Message() string {
	return fmt.Sprintf("reading %q: %v: what needs it is disabled", e.Path, e.Err)
}

func (e TLSFileError) Error() string { return e.KeyString() + ": " + e.Message() }

// tlsFiles reads the TLS files of one configuration.
type tlsFiles struct {
	// read caches a file's content for one Load: a CA named by several
	// option sets is read once.
	read map[string][]byte
	// paths are the files named, absolute, read or not: Run watches their
	// directories.
	paths map[string]bool
	// problems name the files that could not be read.
	problems []TLSFileError
}

// ReadTLSFiles returns d with the TLS files it names read into it (a copy:
// d is not modified), the absolute paths of those files, sorted, and an
// error for each file that could not be read. The file provider and
// `tollgate check` read them this way.
func ReadTLSFiles(d *config.Dynamic) (*config.Dynamic, []string, []TLSFileError) {
	if d == nil {
		return nil, nil, nil
	}
	f := &tlsFiles{read: map[string][]byte{}, paths: map[string]bool{}}
	out := *d
	if d.TLS != nil {
		t := *d.TLS
		t.Certificates = make([]*config.CertAndStores, 0, len(d.TLS.Certificates))
		for i, c := range d.TLS.Certificates {
			if c == nil {
				continue
			}
			cp := *c
			cp.Stores = slices.Clone(c.Stores)
			cp.Certificate = f.pair(keyOf("tls", "certificates", i), c.Certificate)
			t.Certificates = append(t.Certificates, &cp)
		}
		if len(t.Certificates) == 0 {
			t.Certificates = nil
		}
		if d.TLS.Options != nil {
			t.Options = make(map[string]config.TLSOptions, len(d.TLS.Options))
			for _, name := range slices.Sorted(maps.Keys(d.TLS.Options)) {
				o := d.TLS.Options[name]
				o.ClientAuth.CAFiles = f.list(keyOf("tls", "options", name, "clientAuth", "caFiles"), o.ClientAuth.CAFiles)
				t.Options[name] = o
			}
		}
		if d.TLS.Stores != nil {
			t.Stores = make(map[string]config.TLSStore, len(d.TLS.Stores))
			for _, name := range slices.Sorted(maps.Keys(d.TLS.Stores)) {
				st := d.TLS.Stores[name]
				if st.DefaultCertificate != nil {
					c := f.pair(keyOf("tls", "stores", name, "defaultCertificate"), *st.DefaultCertificate)
					st.DefaultCertificate = &c
				}
				t.Stores[name] = st
			}
		}
		out.TLS = &t
	}
	if d.TCP != nil && len(d.TCP.ServersTransports) > 0 {
		tcp := *d.TCP
		tcp.ServersTransports = make(map[string]*config.TCPServersTransport, len(d.TCP.ServersTransports))
		for _, name := range slices.Sorted(maps.Keys(d.TCP.ServersTransports)) {
			st := d.TCP.ServersTransports[name]
			if st == nil || st.TLS == nil {
				tcp.ServersTransports[name] = st
				continue
			}
			cp := *st
			tl := *st.TLS
			key := keyOf("tcp", "serversTransports", name, "tls")
			tl.RootCAs = f.list(append(key, "rootCAs"), st.TLS.RootCAs)
			if st.TLS.Certificates != nil {
				tl.Certificates = make([]config.Certificate, len(st.TLS.Certificates))
				for i, c := range st.TLS.Certificates {
					tl.Certificates[i] = f.pair(append(slices.Clone(key), "certificates", strconv.Itoa(i)), c)
				}
			}
			cp.TLS = &tl
			tcp.ServersTransports[name] = &cp
		}
		out.TCP = &tcp
	}
	return &out, slices.Sorted(maps.Keys(f.paths)), f.problems
}

// maxTLSFile bounds a TLS file: a certificate chain or a CA bundle is
// kilobytes; a larger file is a mistake (or a device) not to read whole.
const maxTLSFile = 4 << 20

// readRegular reads a regular file of at most maxTLSFile bytes. A FIFO, a
// device or a directory is an error, not a read that blocks the provider
// or never ends.
func readRegular(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Size() > maxTLSFile {
		return nil, fmt.Errorf("%d bytes, more than a TLS file's %d", fi.Size(), maxTLSFile)
	}
	return io.ReadAll(io.LimitReader(f, maxTLSFile+1))
}

// keyOf is a key path; ints are list indexes.
func keyOf(parts ...any) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = fmt.Sprint(p)
	}
	return out
}

func (f *tlsFiles) pair(key []string, c config.Certificate) config.Certificate {
	c.CertFile = f.one(append(slices.Clone(key), "certFile"), c.CertFile)
	c.KeyFile = f.one(append(slices.Clone(key), "keyFile"), c.KeyFile)
	return c
}

func (f *tlsFiles) list(key []string, l []config.FileOrContent) []config.FileOrContent {
	if l == nil {
		return nil
	}
	out := make([]config.FileOrContent, len(l))
	for i, v := range l {
		out[i] = f.one(append(slices.Clone(key), strconv.Itoa(i)), v)
	}
	return out
}

// one returns v's content when v names a file that reads, else v.
func (f *tlsFiles) one(key []string, v config.FileOrContent) config.FileOrContent {
	s := string(v)
	if s == "" || strings.Contains(s, pemMarker) {
		return v
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		abs = s
	}
	f.paths[abs] = true
	b, ok := f.read[abs]
	if !ok {
		b, err = readRegular(s)
		if err == nil && !bytes.Contains(b, []byte(pemMarker)) {
			err = errNotPEM
		}
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			f.problems = append(f.problems, TLSFileError{Key: key, Path: s, Err: err})
			return v
		}
		f.read[abs] = b
	}
	return config.FileContent(s, b)
}
