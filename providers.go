package main

import (
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd"
)

// extraProviders builds the Docker and Consul Catalog providers when enabled.
func extraProviders(st *config.Static, log zerolog.Logger) ([]provider.Provider, error) {
	var out []provider.Provider
	if cfg := st.Providers.Docker; cfg != nil {
		p, err := docker.New(cfg, log)
		if err != nil {
			return nil, err // names the option already
		}
		out = append(out, p)
	}
	if cfg := st.Providers.ConsulCatalog; cfg != nil {
		p, err := consulcatalog.New(cfg, log)
		if err != nil {
			return nil, err // names the option already
		}
		out = append(out, p)
	}
	if cfg := st.Providers.KubernetesCRD; cfg != nil {
		p, err := kubernetescrd.New(cfg, log)
		if err != nil {
			return nil, err // names the option already
		}
		out = append(out, p)
	}
	return out, nil
}
