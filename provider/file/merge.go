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
//
// The merged maps are the first file's own until a second file adds to
// them (a directory of one large file is not copied), and which file
// defined a name is looked up in the files added (DefinedBy), not kept per
// name: neither modifies a file's configuration.
type Merger struct {
	// TCP is the merged configuration, with bare names; nil until a file
	// adds something.
	TCP *config.TCPConfiguration
	// TLS is the merged tls section: every file's certificates, in file
	// order, and options and stores by name as for TCP's resources; nil
	// until a file has one.
	TLS *config.TLSConfiguration
	// added are the files' sections, in the order added.
	added []added
	// borrowed are the merged maps that are still a file's own, by kind.
	borrowed map[string]bool
}

type added struct {
	path string
	tcp  *config.TCPConfiguration
	tls  *config.TLSConfiguration
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
	var conflicts []Conflict
	conflicts = mergeMap(m, &m.TCP.Routers, tcp.Routers, provider.KindRouter, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.Services, tcp.Services, provider.KindService, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.Middlewares, tcp.Middlewares, provider.KindMiddleware, path, conflicts)
	conflicts = mergeMap(m, &m.TCP.ServersTransports, tcp.ServersTransports, provider.KindServersTransport, path, conflicts)
	m.added = append(m.added, added{path: path, tcp: tcp})
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
	m.TLS.Certificates = append(m.TLS.Certificates, tls.Certificates...)
	var conflicts []Conflict
	conflicts = mergeMap(m, &m.TLS.Options, tls.Options, provider.KindTLSOptions, path, conflicts)
	conflicts = mergeMap(m, &m.TLS.Stores, tls.Stores, provider.KindTLSStore, path, conflicts)
	m.added = append(m.added, added{path: path, tls: tls})
	return conflicts
}

// Dynamic is the merged configuration (nil sections when no file had
// them). It shares maps with the files' configurations: read it only.
func (m *Merger) Dynamic() *config.Dynamic {
	return &config.Dynamic{TCP: m.TCP, TLS: m.TLS}
}

// DefinedBy returns the file that defined r first ("" when none did).
func (m *Merger) DefinedBy(r provider.Resource) string {
	for _, a := range m.added {
		if defines(a, r) {
			return a.path
		}
	}
	return ""
}

// defines reports whether the file section a defines r.
func defines(a added, r provider.Resource) bool {
	var ok bool
	switch {
	case a.tcp != nil && r.Kind == provider.KindRouter:
		_, ok = a.tcp.Routers[r.Name]
	case a.tcp != nil && r.Kind == provider.KindService:
		_, ok = a.tcp.Services[r.Name]
	case a.tcp != nil && r.Kind == provider.KindMiddleware:
		_, ok = a.tcp.Middlewares[r.Name]
	case a.tcp != nil && r.Kind == provider.KindServersTransport:
		_, ok = a.tcp.ServersTransports[r.Name]
	case a.tls != nil && r.Kind == provider.KindTLSOptions:
		_, ok = a.tls.Options[r.Name]
	case a.tls != nil && r.Kind == provider.KindTLSStore:
		_, ok = a.tls.Stores[r.Name]
	}
	return ok
}

// mergeMap adds src's entries to *dst, in name order, keeping the first
// definition of each name. The first file's map becomes *dst as it is,
// copied when a second file adds to it.
func mergeMap[V any](m *Merger, dst *map[string]V, src map[string]V, kind, path string, conflicts []Conflict) []Conflict {
	if len(src) == 0 {
		return conflicts
	}
	if *dst == nil {
		*dst = src
		if m.borrowed == nil {
			m.borrowed = map[string]bool{}
		}
		m.borrowed[kind] = true
		return conflicts
	}
	if m.borrowed[kind] {
		*dst = maps.Clone(*dst)
		m.borrowed[kind] = false
	}
	for _, name := range slices.Sorted(maps.Keys(src)) {
		v := src[name]
		if old, have := (*dst)[name]; have {
			if !reflect.DeepEqual(old, v) {
				r := provider.Resource{Kind: kind, Name: name}
				conflicts = append(conflicts, Conflict{Resource: r, First: m.DefinedBy(r), Path: path})
			}
			continue
		}
		(*dst)[name] = v
	}
	return conflicts
}
