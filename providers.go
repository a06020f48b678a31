package main

import (
	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// extraProviders builds the Docker and Consul Catalog providers when enabled.
func extraProviders(st *config.Static, log zerolog.Logger) ([]provider.Provider, error) {
	return nil, nil
}
