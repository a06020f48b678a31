package labels

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// parseBlob reads "key=value" lines (split on the first "=").
func parseBlob(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// FuzzDecode checks that no label set panics Decode, DecodeResources,
// DecodeKnobs or DecodeSwarmKnobs, that every error is an *Error naming a
// label of the input (or no label at all), that a successful result
// serialises, and that DecodeResources gives what Decode gives when Decode
// succeeds, and drops only resources (each error naming one) otherwise.
func FuzzDecode(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join(goldenDir, "*.labels"))
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("traefik.tcp.routers.r.tls=true\ntraefik.tcp.routers.r.tls.passthrough=true")
	f.Add("traefik.tcp.middlewares.x.inflightconn=true\ntraefik.tcp.middlewares.x.inflightconn.amount=3")
	f.Add("traefik.tcp.routers.r.entrypoints[0]=a\ntraefik.tcp.services.s.loadbalancer.servers[0].port=1")
	f.Add("Traefik.tcp.routers.r.rule=a\ntraefik.tcp.routers.r.rule=b")
	f.Add("traefik.swarm.network=n\ntraefik.swarm.lbswarm=true\ntraefik.docker.network=m")
	f.Add("traefik.docker.lbswarm=yes\ntraefik.Swarm.Network=x")
	f.Add("traefik.tcp.services.s.loadbalancer.serverstransport=t@file\ntraefik.tcp.services.s.loadbalancer.server.tls=true\ntraefik.tcp.routers.r.tls.domains[0].sans=a,b")
	f.Add("traefik.tls.stores.default.defaultgeneratedcert.domain.main=x\ntraefik.tls.options.o.minversion=v\ntraefik.tcp.serverstransports.t.tls=true")
	f.Fuzz(func(t *testing.T, blob string) {
		m := parseBlob(blob)
		check := func(what string, err error) {
			if err == nil {
				return
			}
			var le *Error
			if !errors.As(err, &le) {
				t.Fatalf("%s: error %v (%T) is not a *labels.Error", what, err, err)
			}
			if le.Key == "" {
				return
			}
			if v, ok := m[le.Key]; !ok || v != le.Value {
				t.Fatalf("%s: error names label %q=%q, not in the input %q", what, le.Key, le.Value, m)
			}
		}
		conf, err := Decode(m)
		check("Decode", err)
		if err == nil {
			if conf == nil {
				t.Fatal("Decode returned nil config and nil error")
			}
			if _, err := json.Marshal(conf); err != nil {
				t.Fatalf("result does not serialise: %v", err)
			}
		}
		partial, dropped, perr := DecodeResources(m)
		check("DecodeResources", perr)
		switch {
		case err == nil && (perr != nil || len(dropped) > 0 || !reflect.DeepEqual(partial, conf)):
			t.Fatalf("Decode succeeds but DecodeResources gives %+v, dropped %v, %v", partial, dropped, perr)
		case err != nil && perr == nil && len(dropped) == 0:
			t.Fatalf("Decode fails (%v) but DecodeResources drops nothing", err)
		}
		for _, d := range dropped {
			check("DecodeResources (dropped)", d)
			var le *Error
			if errors.As(d, &le) && (le.Kind == "" || le.Name == "") {
				t.Fatalf("DecodeResources dropped %v without naming its resource", d)
			}
		}
		if perr == nil {
			if _, err := json.Marshal(partial); err != nil {
				t.Fatalf("DecodeResources' result does not serialise: %v", err)
			}
		}
		_, err = DecodeKnobs(m)
		check("DecodeKnobs", err)
		k, err := DecodeSwarmKnobs(m)
		check("DecodeSwarmKnobs", err)
		for _, d := range k.Deprecated {
			if _, ok := m[d]; !ok {
				t.Fatalf("DecodeSwarmKnobs: deprecated label %q is not in the input", d)
			}
		}
	})
}
