package middleware

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/proxy/tcp"
)

// Warning is a problem with a middleware's block that leaves it serving
// (its status is warning): Field is the key it is about, a dotted path
// below the middleware as written in files ("inFlightConn.failureMode",
// "ipAllowList.sourceRange[1]"), "" for the whole block; Message says it.
type Warning struct {
	Field, Message string
}

// WarningOf is err as a Warning, on the field err names
// (config.FieldError), else on the whole block.
func WarningOf(err error) Warning { return Warning{Field: config.FieldOf(err), Message: err.Error()} }

// WarningsOf is WarningOf of each of errs.
func WarningsOf(errs []error) []Warning {
	if len(errs) == 0 {
		return nil
	}
	out := make([]Warning, len(errs))
	for i, err := range errs {
		out[i] = WarningOf(err)
	}
	return out
}

// Spec is what a kind's constructor is given besides its block.
type Spec struct {
	// Name is the middleware's qualified name (limit@file): the key of
	// its state in the Keepers, and what its logs and refusals name.
	Name string
	// Key is the key its block is written under: the kind's name, or a
	// deprecated name of it (ipWhiteList), which its errors then name.
	// New fills it.
	Key string
	// Log is the compile's log; the middleware adds its own fields.
	Log zerolog.Logger
	// Offline is tollgate check's: the block is judged, and nothing is
	// read (databases, key files, certificates) or reached (stores, a
	// Local API).
	Offline bool
	// Keepers are the proxy state's: where the kind's state that outlives
	// reloads is (each kind's accessor, KeeperOf).
	Keepers *Keepers
}

// Built is a built middleware.
type Built struct {
	// Kind is the kind's name (inFlightConn), set by New even when the
	// constructor fails.
	Kind string
	// Middleware wraps each router's handler.
	Middleware tcp.Middleware
	// Live is its state as it changes, for the API (a Viewer shows
	// itself beside the configuration, a ClientLister lists its clients)
	// and an upgrade's hand-over; nil when it has none.
	Live any
	// Warnings are the block's problems that leave it serving, in order.
	Warnings []Warning
}

// Kind is a middleware kind: how Register knows it.
type Kind[C any] struct {
	// Name is the key its block is written under in a middleware
	// (tcp.middlewares.<name>.<Name>): the JSON name of a field of
	// config.TCPMiddleware ("inFlightConn").
	Name string
	// Block returns m's block of this kind, nil when m has none.
	Block func(m *config.TCPMiddleware) *C
	// Key, when set, returns the key m's block is written under, when it
	// may be another than Name (ipAllowList's deprecated ipWhiteList).
	Key func(m *config.TCPMiddleware) string
	// New validates the block (the one place its ranges are judged) and
	// builds the middleware spec names: an error naming the field
	// (config.FieldErrorf) disables it, warnings leave it serving.
	New func(spec Spec, cfg *C) (Built, error)
	// Keeper, when set, makes the kind's state that outlives reloads,
	// once per proxy state (NewKeepers).
	Keeper func(o Options) Keeper
	// Metrics, when set, calls f with the decisions of each middleware
	// whose state k (the kind's Keeper) holds, in any order; f keeps no
	// Counts.Reasons past its call.
	Metrics func(k Keeper, f func(name string, c Counts))
}

// kind is a registered Kind, whatever its block's type.
type kind interface {
	name() string
	set(m *config.TCPMiddleware) bool
	build(spec Spec, m *config.TCPMiddleware) (Built, error)
	keeper(o Options) Keeper
	counts(k Keeper, f func(name string, c Counts))
}

func (k *Kind[C]) name() string                     { return k.Name }
func (k *Kind[C]) set(m *config.TCPMiddleware) bool { return k.Block(m) != nil }

func (k *Kind[C]) build(spec Spec, m *config.TCPMiddleware) (Built, error) {
	spec.Key = k.Name
	if k.Key != nil {
		spec.Key = k.Key(m)
	}
	return k.New(spec, k.Block(m))
}

func (k *Kind[C]) keeper(o Options) Keeper {
	if k.Keeper == nil {
		return nil
	}
	return k.Keeper(o)
}

func (k *Kind[C]) counts(kp Keeper, f func(name string, c Counts)) {
	if k.Metrics != nil && kp != nil {
		k.Metrics(kp, f)
	}
}

var (
	mu    sync.RWMutex
	kinds []kind // in the order of config.TCPMiddleware's fields
	index = map[string]int{}
)

// Register adds a kind; each kind's package calls it in its init. It
// panics on a kind that is incomplete, registered twice, or whose Name is
// not a key of config.TCPMiddleware: a programming error, found at start.
func Register[C any](k Kind[C]) {
	if k.Name == "" || k.Block == nil || k.New == nil {
		panic("middleware.Register: a kind needs a Name, a Block and a New")
	}
	pos := fieldIndex(k.Name)
	if pos < 0 {
		panic("middleware.Register: " + k.Name + " is not a key of config.TCPMiddleware")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := index[k.Name]; ok {
		panic("middleware.Register: " + k.Name + " registered twice")
	}
	kinds = append(kinds, &k)
	slices.SortFunc(kinds, func(a, b kind) int { return fieldIndex(a.name()) - fieldIndex(b.name()) })
	clear(index)
	for i, kd := range kinds {
		index[kd.name()] = i
	}
}

// fieldIndex is the index of the field of config.TCPMiddleware whose JSON
// name is name, or -1.
func fieldIndex(name string) int {
	t := reflect.TypeFor[config.TCPMiddleware]()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag == name {
			return i
		}
	}
	return -1
}

// Kinds returns the registered kinds' names, in the order of
// config.TCPMiddleware's fields.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name()
	}
	return out
}

// registered returns the registered kinds (never modified in place).
func registered() []kind {
	mu.RLock()
	defer mu.RUnlock()
	return kinds
}

// New builds the middleware block m (named spec.Name) with the one kind
// whose block is set: none, several, or keys that may not be written
// together are an error; m's deprecated keys come first among the
// warnings, which Built carries even when the constructor fails.
func New(spec Spec, m *config.TCPMiddleware) (Built, error) {
	if err := m.Conflict(); err != nil {
		return Built{}, err
	}
	ks := registered()
	var found kind
	n := 0
	for _, k := range ks {
		if k.set(m) {
			found, n = k, n+1
		}
	}
	if n != 1 {
		return Built{}, kindError(ks, m, n)
	}
	deprecated := WarningsOf(m.Deprecations())
	b, err := found.build(spec, m)
	if err != nil {
		b = Built{}
	}
	b.Kind = found.name()
	if deprecated != nil {
		b.Warnings = append(deprecated, b.Warnings...)
	}
	return b, err
}

// kindError is New's error for a block with n kinds set, n != 1.
func kindError(ks []kind, m *config.TCPMiddleware, n int) error {
	var names []string
	for _, k := range ks {
		if n == 0 || k.set(m) {
			names = append(names, k.name())
		}
	}
	if n > 1 {
		return fmt.Errorf("middleware has several types %v: one middleware block takes exactly one", names)
	}
	if len(names) == 0 {
		return errors.New("middleware has no type: no middleware kind is registered")
	}
	list := strings.Join(names[:len(names)-1], ", ")
	if len(names) > 1 {
		list += " or "
	}
	return errors.New("middleware has no type: set " + list + names[len(names)-1])
}
