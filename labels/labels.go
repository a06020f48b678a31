// Package labels decodes Traefik-style `traefik.tcp.*` labels (Docker) and tags
// (Consul, normalised to the same map shape) into dynamic configuration.
package labels

import (
	"github.com/traefik/paerser/parser"

	"github.com/tollgate-proxy/tollgate/config"
)

// Decode decodes the `traefik.tcp.` labels in m into a configuration. Labels
// outside that prefix are ignored. Errors name the offending label.
func Decode(m map[string]string) (*config.Dynamic, error) {
	conf := &config.Dynamic{}
	if err := parser.Decode(m, conf, parser.DefaultRootName, "traefik.tcp."); err != nil {
		return nil, err
	}
	return conf, nil
}
