package geoip

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oschwald/maxminddb-golang/v2"
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/middleware/internal/registry"
)

// MaxDatabaseSize bounds the file a database is read from (GeoIP2 City, the
// largest MaxMind database, is about 130 MB).
const MaxDatabaseSize = 1 << 30

// DefaultInterval is how often a Pool looks at its files when its Interval
// is zero.
const DefaultInterval = 2 * time.Second

// CleanPath is the one rule for a database path, before any I/O: not empty,
// no NUL byte, not a directory name, not longer than the kernel takes
// (PATH_MAX); it returns the path cleaned (filepath.Clean). Relative paths
// are taken from the working directory when the database is opened.
func CleanPath(p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", errors.New("the path is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%s contains a NUL byte", short(p))
	case len(p) >= 4096:
		return "", fmt.Errorf("%s is longer than a path may be (4095 bytes)", short(p))
	case strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/.."):
		return "", fmt.Errorf("%s names a directory: name the .mmdb file", short(p))
	}
	c := filepath.Clean(p)
	if c == "." || c == ".." || c == "/" {
		return "", fmt.Errorf("%s names a directory: name the .mmdb file", short(p))
	}
	return c, nil
}

// attrs is what a record says that the rules consult; the zero value says
// nothing.
type attrs struct {
	country   [2]byte // ISO 3166-1 alpha-2, upper case; zero: none
	continent [2]byte // AF AN AS EU NA OC SA; zero: none
	asn       uint32  // zero: none
}

// loaded is one version of a database file, read whole into memory (a file
// rewritten in place under a memory map would crash the process), its whole
// search tree walked and its records' attributes decoded once: a damaged
// tree or record is found when the file is read, never at accept.
type loaded struct {
	r     *maxminddb.Reader
	rec   map[uint32]uint32 // record offset -> index in attrs
	attrs []attrs
	info  LoadInfo
}

// LoadInfo describes a loaded database, for the API and logs.
type LoadInfo struct {
	Path         string    `json:"path"`
	DatabaseType string    `json:"databaseType"`
	BuildTime    time.Time `json:"buildTime"`
	LoadedAt     time.Time `json:"loadedAt"`
	Networks     int       `json:"networks"`
	Records      int       `json:"records"`
	Size         int64     `json:"size"`
}

// fileKey identifies a version of a file: a rename (geoipupdate's way)
// changes the inode, a rewrite in place the size or time.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

func statKey(fi os.FileInfo) fileKey {
	k := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.dev, k.ino = uint64(st.Dev), st.Ino //nolint:unconvert // Stat_t.Dev is not a uint64 on every platform
	}
	return k
}

// load reads and checks the database at path. Every error names the file.
func load(path string) (*loaded, fileKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileKey{}, fmt.Errorf("opening geoIP database %s: %w", short(path), unwrapPath(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileKey{}, fmt.Errorf("geoIP database %s: %w", short(path), err)
	}
	key := statKey(fi)
	if !fi.Mode().IsRegular() {
		return nil, key, fmt.Errorf("geoIP database %s is not a regular file (%s)", short(path), fi.Mode().Type())
	}
	if fi.Size() > MaxDatabaseSize {
		return nil, key, fmt.Errorf("geoIP database %s is %d bytes, more than %d", short(path), fi.Size(), MaxDatabaseSize)
	}
	buf, err := io.ReadAll(io.LimitReader(f, MaxDatabaseSize+1))
	if err != nil {
		return nil, key, fmt.Errorf("reading geoIP database %s: %w", short(path), err)
	}
	l, err := parse(buf)
	if err != nil {
		return nil, key, fmt.Errorf("geoIP database %s is not a valid MaxMind-format database: %w", short(path), err)
	}
	l.info.Path, l.info.Size, l.info.LoadedAt = path, int64(len(buf)), time.Now()
	return l, key, nil
}

// unwrapPath drops the *PathError's own copy of the path (the message names
// it already).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parse opens buf as a MaxMind-format database and decodes what each record
// says, once: a lookup at accept is then the tree walk and a map read.
func parse(buf []byte) (*loaded, error) {
	if len(buf) == 0 {
		return nil, errors.New("the file is empty")
	}
	r, err := maxminddb.OpenBytes(buf)
	if err != nil {
		return nil, err
	}
	l := &loaded{r: r, rec: map[uint32]uint32{}}
	index := map[attrs]uint32{}
	for res := range r.Networks() {
		if err := res.Err(); err != nil {
			return nil, err
		}
		l.info.Networks++
		off := uint32(res.Offset())
		if _, ok := l.rec[off]; ok {
			continue
		}
		a, err := decodeAttrs(res)
		if err != nil {
			return nil, fmt.Errorf("the record of %s: %w", res.Prefix(), err)
		}
		i, ok := index[a]
		if !ok {
			i = uint32(len(l.attrs))
			index[a] = i
			l.attrs = append(l.attrs, a)
		}
		l.rec[off] = i
	}
	l.info.Records = len(l.rec)
	l.info.DatabaseType = r.Metadata.DatabaseType
	l.info.BuildTime = r.Metadata.BuildTime().UTC()
	return l, nil
}

// rawRecord is the part of a record decodeAttrs reads, each key decoded as
// whatever it holds (a layout this reader does not know then says nothing,
// while a damaged record is an error); the rest of the record is skipped.
type rawRecord struct {
	Country           any `maxminddb:"country"`
	RegisteredCountry any `maxminddb:"registered_country"`
	Continent         any `maxminddb:"continent"`
	ASN               any `maxminddb:"autonomous_system_number"`
	CountryCode       any `maxminddb:"country_code"`   // IPinfo
	ContinentCode     any `maxminddb:"continent_code"` // IPinfo
	ASNText           any `maxminddb:"asn"`            // IPinfo: "AS64512"
}

// decodeAttrs reads a record's country, continent and autonomous system in
// MaxMind's layout (GeoIP2/GeoLite2, DB-IP Lite: country.iso_code, else
// registered_country.iso_code; continent.code; autonomous_system_number) or
// IPinfo's (country_code, continent_code, asn "AS64512"). A key of another
// type, or a value that is not a code, says nothing.
func decodeAttrs(res maxminddb.Result) (attrs, error) {
	var r rawRecord
	if err := res.Decode(&r); err != nil {
		return attrs{}, err
	}
	var a attrs
	for _, v := range []any{member(r.Country, "iso_code"), member(r.RegisteredCountry, "iso_code"), r.CountryCode} {
		if c, ok := code(v); ok && isCountry(c) {
			a.country = c
			break
		}
	}
	for _, v := range []any{member(r.Continent, "code"), r.ContinentCode} {
		if c, ok := code(v); ok && continentBit(c) != 0 {
			a.continent = c
			break
		}
	}
	switch n := r.ASN.(type) {
	case uint64:
		if n > 0 && n <= 1<<32-1 {
			a.asn = uint32(n)
		}
	case uint32:
		a.asn = n
	}
	if s, ok := r.ASNText.(string); ok && a.asn == 0 {
		if n, err := parseASN(s); err == nil {
			a.asn = n
		}
	}
	return a, nil
}

// member is m[key] when m is a map, else nil.
func member(m any, key string) any {
	if mm, ok := m.(map[string]any); ok {
		return mm[key]
	}
	return nil
}

// code reads a two-letter code (any case) from v.
func code(v any) ([2]byte, bool) {
	s, ok := v.(string)
	if !ok || len(s) != 2 {
		return [2]byte{}, false
	}
	c := [2]byte{upper(s[0]), upper(s[1])}
	_, ok = codeIndex(c)
	return c, ok
}

// lookup returns what l says of a (unmapped, without zone).
func (l *loaded) lookup(a netip.Addr) (attrs, bool) {
	res := l.r.Lookup(a)
	if !res.Found() {
		return attrs{}, false
	}
	i, ok := l.rec[uint32(res.Offset())]
	if !ok {
		return attrs{}, false
	}
	return l.attrs[i], true
}

// Database is one database file as the middlewares use it: its last good
// version, replaced when the file is. It is shared by every middleware
// naming the file (Pool) and safe for concurrent use.
type Database struct {
	path string
	cur  atomic.Pointer[loaded]

	// the watching goroutine's own
	key     fileKey // of the version in cur, or of the last version tried
	pending fileKey // a change seen on the previous look, not loaded yet

	mu      sync.Mutex // over what Status reads
	lastErr error
	errAt   time.Time
	reloads uint64

	stop chan struct{}
	done chan struct{}
}

// Path is the file, as cleaned.
func (d *Database) Path() string { return d.path }

// DatabaseStatus is a Database's state for the API and metrics.
type DatabaseStatus struct {
	LoadInfo
	// Reloads counts the replacements applied since the file was first read.
	Reloads uint64 `json:"reloads"`
	// LastError is the last replacement that could not be used (the
	// previous version goes on serving), empty when the file in place is
	// the one serving.
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
}

// Status says which version serves and what went wrong since.
func (d *Database) Status() DatabaseStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := DatabaseStatus{Reloads: d.reloads}
	if l := d.cur.Load(); l != nil {
		s.LoadInfo = l.info
	}
	if d.lastErr != nil {
		s.LastError, s.LastErrorAt = d.lastErr.Error(), d.errAt
	}
	return s
}

// check looks at the file once: a new version is loaded and, when good,
// used from then on; a broken one leaves the last good version serving,
// with a warning (once per version). A version rewritten in place is
// loaded once it has stopped changing for one look; a renamed one (a new
// inode) at once.
func (d *Database) check(log *zerolog.Logger) {
	fi, err := os.Stat(d.path)
	if err != nil {
		// geoipupdate renames over the file, so it never goes missing; a
		// file that did is left serving until one is back. Said once.
		if d.key != (fileKey{}) {
			e := fmt.Errorf("geoIP database %s: %w (the last good version goes on serving)", short(d.path), unwrapPath(err))
			d.setErr(e)
			log.Warn().Str("database", d.path).Err(e).Msg("geoIP database unreadable")
		}
		d.key, d.pending = fileKey{}, fileKey{}
		return
	}
	k := statKey(fi)
	if k == d.key {
		d.pending = fileKey{}
		return
	}
	if k.ino == d.key.ino && k.dev == d.key.dev && k != d.pending {
		d.pending = k // rewritten in place: wait until it stays still
		return
	}
	d.pending = fileKey{}
	l, lk, err := load(d.path) // without the lock: Status answers meanwhile
	if lk != (fileKey{}) {
		d.key = lk
	} else {
		d.key = k
	}
	if err != nil {
		d.setErr(fmt.Errorf("%w (the last good version goes on serving)", err))
		log.Warn().Str("database", d.path).Err(err).Msg("geoIP database replaced by one that cannot be used: the last good version goes on serving")
		return
	}
	d.cur.Store(l)
	d.mu.Lock()
	d.lastErr = nil
	d.reloads++
	d.mu.Unlock()
	log.Info().Str("database", d.path).Str("databaseType", l.info.DatabaseType).Time("buildTime", l.info.BuildTime).
		Int("networks", l.info.Networks).Msg("geoIP database reloaded")
}

func (d *Database) setErr(err error) {
	d.mu.Lock()
	d.lastErr, d.errAt = err, time.Now()
	d.mu.Unlock()
}

func (d *Database) watch(every time.Duration, log zerolog.Logger) {
	defer close(d.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.check(&log)
		}
	}
}

// Pool holds the databases the middlewares use, one per file, each watched
// by a goroutine of its own from its first Get until a Sweep or Close lets
// it go. A middleware built in a later configuration generation gets the
// same Database (the file is not read again). The zero value is ready to use
// (Interval DefaultInterval, no log); a Pool is safe for concurrent use.
type Pool struct {
	// Interval is how often each file is looked at (a stat; the file is
	// read only when it changed). Set it before the first Get.
	Interval time.Duration
	// Log receives the reloads and the replacements that cannot be used.
	Log zerolog.Logger

	reg registry.Registry[*Database]
}

// Get returns the Database for path (cleaned by CleanPath, made absolute),
// reading it when the pool does not hold it yet. A file that is missing or
// not a valid database is an error naming it, and nothing is held.
func (p *Pool) Get(path string) (*Database, error) {
	c, err := CleanPath(path)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(c); err == nil {
		c = abs
	}
	var loadErr error
	d := p.reg.Update(c, func(cur *Database, ok bool) (*Database, bool) {
		if ok {
			return cur, false
		}
		l, k, err := load(c)
		if err != nil {
			loadErr = err
			return nil, false
		}
		d := &Database{path: c, key: k, stop: make(chan struct{}), done: make(chan struct{})}
		d.cur.Store(l)
		every := p.Interval
		if every <= 0 {
			every = DefaultInterval
		}
		go d.watch(every, p.Log)
		return d, true
	})
	if loadErr != nil {
		return nil, loadErr
	}
	return d, nil
}

// Sweep stops watching the files whose paths (as Database.Path) are not in
// keep. A middleware still holding one of them goes on using its last good
// version.
func (p *Pool) Sweep(keep map[string]bool) {
	var stopped []*Database
	p.reg.Sweep(keep, func(*Database) bool { return true }, func(d *Database) {
		close(d.stop)
		stopped = append(stopped, d)
	})
	for _, d := range stopped {
		<-d.done
	}
}

// Close stops watching every file.
func (p *Pool) Close() { p.Sweep(nil) }

// Each calls f for every database held, by path.
func (p *Pool) Each(f func(d *Database)) {
	p.reg.Each(func(_ string, d *Database) { f(d) })
}
