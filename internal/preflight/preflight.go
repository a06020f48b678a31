// Package preflight is what tollgate checks and says about a static
// configuration before it starts anything: the errors that stop a start
// (Validate's, which refuses the Traefik options config.TraefikOptions
// refuses; the default servers transport's; the certificate resolvers'
// options), and the notices about what the configuration means here
// (Traefik options that mean something else or change nothing, variables
// and file keys that configure nothing, what the entry points became).
// It reaches no provider, CA or store and binds no socket; the only files
// it reads are those the default servers transport names (its CAs and
// certificate).
//
// One lint, two readers: a start (internal/process) logs the notices, each
// with the field it is about; `tollgate check --static` (package check)
// prints them, one line each.
package preflight

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/acme"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/metrics"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// A Notice is one line about the static configuration: a warning, or
// information (level info).
type Notice struct {
	Warn bool
	// Field and Value name what the notice is about, as a log field
	// ("entrypoint", "key", "variable", "resolver"), or are empty.
	Field, Value string
	Msg          string
}

// String is the notice as one line without its level: its message, after
// the variable it is about (a log names that in a field of its own).
func (n Notice) String() string {
	if n.Field == "variable" {
		return n.Value + ": " + n.Msg
	}
	return n.Msg
}

// A Report is what Check found in a configuration that starts.
type Report struct {
	// Notices are the lines a start logs about the configuration, in the
	// order it logs them.
	Notices []Notice
	// ACME are the certificatesResolvers with an ACME challenge: those a
	// start builds a client for (internal/acme), sorted. The others serve
	// their routers from the TLS store (a notice says so).
	ACME []string
}

// Warnings counts the report's warnings.
func (r Report) Warnings() int {
	n := 0
	for _, x := range r.Notices {
		if x.Warn {
			n++
		}
	}
	return n
}

// Check validates st (config.Static.Validate, which completes it) and
// says what a start would refuse in it, or what it would log about it.
// start is what the command line found about its sources: the variables
// and file keys that configure nothing, named in the error too (a
// misspelled TOLLGATE_ENTRYPOINTS_... variable leaves no entry point).
func Check(st *config.Static, start cmdline.Start) (Report, error) {
	if err := st.Validate(); err != nil {
		for _, v := range start.Ignored {
			err = fmt.Errorf("%w; %s %s", err, v.Name, v.Why)
		}
		return Report{}, err
	}
	var r Report
	for _, k := range start.UnknownKeys {
		r.Notices = append(r.Notices, Notice{Warn: true, Field: "key", Value: k.Key, Msg: k.String()})
	}
	for _, w := range st.TraefikWarnings() {
		r.Notices = append(r.Notices, Notice{Warn: true, Msg: w})
	}
	r.Notices = append(r.Notices, traefikOnly(st)...)
	for _, v := range start.Ignored {
		r.Notices = append(r.Notices, Notice{Warn: true, Field: "variable", Value: v.Name, Msg: v.Why})
	}
	if t := st.TCPServersTransport; t != nil {
		if err := proxy.CheckTransport("tcpServersTransport", t.Transport()); err != nil {
			return Report{}, err
		}
	}
	if err := r.resolvers(st); err != nil {
		return Report{}, err
	}
	return r, nil
}

// resolvers checks the certificatesResolvers with an acme section
// (internal/acme's Check and CheckResolvers) and adds their warnings.
func (r *Report) resolvers(st *config.Static) error {
	withACME := map[string]*config.ACMEResolver{}
	for name, res := range st.CertificatesResolvers {
		if res != nil && res.ACME != nil {
			withACME[name] = res.ACME
		}
	}
	if err := acme.CheckResolvers(withACME); err != nil {
		return err
	}
	entryPoints := slices.Sorted(maps.Keys(st.EntryPoints))
	for _, name := range slices.Sorted(maps.Keys(withACME)) {
		warnings, err := acme.Check(name, withACME[name], entryPoints)
		if errors.Is(err, acme.ErrNoChallenge) {
			r.Notices = append(r.Notices, Notice{Warn: true, Field: "resolver", Value: name,
				Msg: err.Error() + "; until then the routers naming it are served from the TLS store's certificates"})
			continue
		}
		if err != nil {
			return err
		}
		for _, w := range notWarnedYet(st, warnings) {
			r.Notices = append(r.Notices, Notice{Warn: true, Field: "resolver", Value: name, Msg: w})
		}
		r.ACME = append(r.ACME, name)
	}
	return nil
}

// traefikOnly says what of Traefik's static options that were given
// tollgate does differently, beyond the options that change nothing here
// (config.TraefikOptions, whose warnings Validate records): values that
// mean something else here, and what Validate made of the entry points.
func traefikOnly(st *config.Static) []Notice {
	var out []Notice
	if a := st.API; a != nil && a.Insecure {
		out = append(out, Notice{Warn: true, Msg: "api.insecure: the admin API (configuration, client IPs; upgrades with api.upgradeTokenFile's token) listens on " + a.Address + ", reachable from other hosts unless that address is local"})
	}
	if c := st.Core; c != nil && strings.EqualFold(c.DefaultRuleSyntax, "v2") {
		out = append(out, Notice{Warn: true, Msg: "core.defaultRuleSyntax v2 is deprecated (as in Traefik v3): rules are read in v3 syntax, which reads single-value HostSNI and ClientIP the same; several values in one matcher (v2 only) disable their router, and a v2 {name:regexp} HostSNIRegexp pattern is read as a Go regexp"})
	}
	if al := st.AccessLog; al != nil && al.Format != "" && !strings.EqualFold(al.Format, "json") {
		out = append(out, Notice{Warn: true, Msg: "accessLog.format: tollgate writes JSON lines, one per closed connection, whatever the format (" + al.Format + " is Traefik's line for HTTP requests)"})
	}
	out = append(out, entryPointNotices(st)...)
	if p := st.Ping; p != nil && p.ManualRouting {
		out = append(out, Notice{Warn: true, Msg: "ping.manualRouting: /ping is on no entry point of its own (Traefik leaves it to an HTTP router to ping@internal, which tollgate does not have): only the admin API answers it, when on"})
	}
	for _, w := range notWarnedYet(st, metrics.Warnings(st.Metrics)) {
		out = append(out, Notice{Warn: true, Msg: w})
	}
	return out
}

// entryPointNotices says what Validate made of the entry points: internal
// ones, UDP ones, and those whose plain HTTP requests are redirected.
func entryPointNotices(st *config.Static) []Notice {
	var out []Notice
	for _, name := range st.InternalEntryPoints() {
		out = append(out, Notice{Field: "entrypoint", Value: name, Msg: "entryPoints." + name + ": internal, as in Traefik (named by ping.entryPoint or metrics.prometheus.entryPoint, traefik by default): it serves /ping or /metrics and proxies nothing"})
	}
	for _, name := range st.UDPEntryPoints() {
		out = append(out, Notice{Warn: true, Field: "entrypoint", Value: name, Msg: "entryPoints." + name + ": a UDP entry point (its address ends in /udp): tollgate routes TCP only and does not listen on it"})
	}
	for _, name := range slices.Sorted(maps.Keys(st.EntryPoints)) {
		if r := st.EntryPoints[name].Redirect(); r != nil {
			to := r.Scheme + " on its default port"
			if r.Port != 0 {
				to = fmt.Sprintf("%s on port %d", r.Scheme, r.Port)
			}
			out = append(out, Notice{Field: "entrypoint", Value: name, Msg: "entryPoints." + name + ".http.redirections: plain HTTP requests that no TCP router takes are redirected to " + to})
		}
	}
	return out
}

// notWarnedYet are the warnings of another part (internal/acme's about a
// resolver's options, metrics') but for those about an option
// config.TraefikOptions warned about already: one warning per option.
func notWarnedYet(st *config.Static, warnings []string) []string {
	warned := st.TraefikWarned()
	var out []string
	for _, w := range warnings {
		if !slices.ContainsFunc(warned, func(o string) bool {
			return strings.HasPrefix(w, o+" ") || strings.HasPrefix(w, o+":") || strings.HasPrefix(w, o+",")
		}) {
			out = append(out, w)
		}
	}
	return out
}
