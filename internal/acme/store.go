package acme

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// The storage file is Traefik's acme.json, so that a Traefik container's
// file is read as it is and the file tollgate writes is Traefik's again: a
// JSON object with one entry per resolver name, each holding the account
// (its key: PKCS #1 DER, as Traefik writes it) and the certificates (PEM
// chain and PEM key, each base64 in JSON). Several resolvers may share one
// file; each reads and writes only its own entry.

// storedData is one resolver's entry.
type storedData struct {
	Account      *storedAccount `json:"Account"`
	Certificates []*storedCert  `json:"Certificates"`
}

type storedAccount struct {
	Email        string          `json:"Email"`
	Registration json.RawMessage `json:"Registration,omitempty"`
	PrivateKey   []byte          `json:"PrivateKey"`
	KeyType      string          `json:"KeyType"`
}

type storedDomain struct {
	Main string   `json:"main,omitempty"`
	SANs []string `json:"sans,omitempty"`
}

type storedCert struct {
	Domain      storedDomain `json:"domain"`
	Certificate []byte       `json:"certificate"`
	Key         []byte       `json:"key"`
	Store       string       `json:"Store"`
}

// fileStore is one storage file. Its methods hold mu for a whole read,
// change and write, so resolvers sharing the file do not lose each other's
// writes.
type fileStore struct {
	path string
	mu   sync.Mutex
}

var (
	storesMu sync.Mutex
	stores   = map[string]*fileStore{}
)

// openStore returns the store of path, shared by the resolvers that name
// the same file.
func openStore(path string) (*fileStore, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	storesMu.Lock()
	defer storesMu.Unlock()
	s := stores[abs]
	if s == nil {
		s = &fileStore{path: abs}
		stores[abs] = s
	}
	return s, nil
}

// readAll reads the whole file: every resolver's entry, as raw JSON so that
// entries tollgate does not read are written back unchanged. A missing or
// empty file is an empty object; anything else that is not one is an error
// naming the file (it is never overwritten).
func (s *fileStore) readAll() (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(strings.TrimSpace(string(b))) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	if err != nil {
		return nil, err
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("%s is not an ACME storage file (Traefik's acme.json format): %w", s.path, err)
	}
	return all, nil
}

// load returns resolver's entry (empty when it has none).
func (s *fileStore) load(resolver string) (*storedData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked(resolver)
}

func (s *fileStore) loadLocked(resolver string) (*storedData, error) {
	all, err := s.readAll()
	if err != nil {
		return nil, err
	}
	d := &storedData{}
	if raw, ok := all[resolver]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, d); err != nil {
			return nil, fmt.Errorf("%s: entry %q: %w", s.path, resolver, err)
		}
	}
	return d, nil
}

// update applies change to resolver's entry and writes the file: a new
// file beside it, renamed over it, readable by its owner only (Traefik
// refuses an acme.json others can read).
func (s *fileStore) update(resolver string, change func(*storedData)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another process may write the file too: the old and the new process
	// of an upgrade in place, or a second tollgate on the same volume. An
	// exclusive lock on a file beside it orders their read, change and
	// write.
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	all, err := s.readAll()
	if err != nil {
		return err
	}
	d, err := s.loadLocked(resolver)
	if err != nil {
		return err
	}
	change(d)
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	all[resolver] = raw
	out, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(out, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path)
}

// keyPair parses a stored certificate: its PEM chain and PEM key.
func keyPair(c *storedCert) (*tls.Certificate, error) {
	kp, err := tls.X509KeyPair(c.Certificate, c.Key)
	if err != nil {
		return nil, err
	}
	if kp.Leaf == nil {
		if kp.Leaf, err = x509.ParseCertificate(kp.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &kp, nil
}
