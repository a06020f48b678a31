package file

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// Merger merges dynamic files one at a time, in order, the way the
// directory mode does (files sorted by name): a name defined by several
// files keeps the first definition, and one defined differently later is a
// Conflict naming both files. `tollgate check` merges the files it is given
// with the same Merger. The zero value is ready to use.
type Merger struct {
	// TCP is the merged configuration, with bare names; nil until a file
	// adds something.
	TCP *config.TCPConfiguration
	// TLS is the merged tls section: every file's certificates, in file
	// order, and options and stores by name as for TCP's resources; nil
	// until a file has one.
	TLS   *config.TLSConfiguration
	first map[provider.Resource]string
}

// Conflict is a resource that a later file defines differently from the
// file that defined it first; the first definition is kept.
type Conflict struct {
	Resource provider.Resource
	First    string // the file whose definition is kept
	Path     string // the file whose definition is dropped
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s %q is defined differently in %s and %s: keeping the first", c.Resource.Kind, c.Resource.Name, c.First, c.Path)
}

// Add merges the configuration of the file at path and returns the names it
// defines differently from an earlier file.
func (m *Merger) Add(path string, tcp *config.TCPConfiguration) []Conflict {
	if tcp == nil {
		return nil
	}
	if m.TCP == nil {
		m.TCP = &config.TCPConfiguration{}
	}
	if m.first == nil {
		m.first = map[provider.Resource]string{}
	}
	var conflicts []Conflict
	conflicts = mergeMap(m, &m.TCP.Routers, tcp.Routers, provider.KindRouter, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.Services, tcp.Services, provider.KindService, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.Middlewares, tcp.Middlewares, provider.KindMiddleware, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.ServersTransports, tcp.ServersTransports, provider.KindServersTransport, path, conflicts)
	return conflicts
}

// AddTLS merges the tls section of the file at path: its certificates are
// added to the others, its options and stores are merged by name as Add
// merges routers.
func (m *Merger) AddTLS(path string, tls *config.TLSConfiguration) []Conflict {
	if tls == nil {
		return nil
	}
	if m.TLS == nil {
		m.TLS = &config.TLSConfiguration{}
	}
	if m.first == nil {
		m.first = map[provider.Resource]string{}
	}
	m.TLS.Certificates = append(m.TLS.Certificates, tls.Certificates...)
	var conflicts []Conflict
	conflicts = mergeMap(m, &m.TLS.Options, tls.Options, provider.KindTLSOptions, path, conflicts)
	conflicts = mergeMap(m, &m.TLS.Stores, tls.Stores, provider.KindTLSStore, path, conflicts)
	return conflicts
}

// Dynamic is the merged configuration (nil sections when no file had
// them).
func (m *Merger) Dynamic() *config.Dynamic {
	return &config.Dynamic{TCP: m.TCP, TLS: m.TLS}
}

// DefinedBy returns the file that defined r first ("" when none did).
func (m *Merger) DefinedBy(r provider.Resource) string { return m.first[r] }

// mergeMap adds src's entries to *dst (made on first use), in name order,
// keeping the first definition of each name.
func mergeMap[V any](m *Merger, dst *map[string]V, src map[string]V, kind, path string, conflicts []Conflict) []Conflict {
	for _, name := range slices.Sorted(maps.Keys(src)) {
		v := src[name]
		r := provider.Resource{Kind: kind, Name: name}
		if old, have := (*dst)[name]; have {
			if !reflect.DeepEqual(old, v) {
				conflicts = append(conflicts, Conflict{Resource: r, First: m.first[r], Path: path})
			}
			continue
		}
		if *dst == nil {
			*dst = map[string]V{}
		}
		(*dst)[name] = v
		m.first[r] = path
	}
	return conflicts
}
