package process

import (
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	httpprovider "github.com/tollgate-proxy/tollgate/provider/http"
	"github.com/tollgate-proxy/tollgate/provider/kubernetescrd"
	kvconsul "github.com/tollgate-proxy/tollgate/provider/kv/consul"
	kvetcd "github.com/tollgate-proxy/tollgate/provider/kv/etcd"
	kvredis "github.com/tollgate-proxy/tollgate/provider/kv/redis"
	kvzookeeper "github.com/tollgate-proxy/tollgate/provider/kv/zookeeper"
	"github.com/tollgate-proxy/tollgate/provider/swarm"
)

// labelProviders builds the Docker, Consul Catalog, Kubernetes CRD, Docker
// Swarm, HTTP and KV store providers that the static configuration enables,
// each New(cfg, po). A new provider is one more case here (ARCHITECTURE.md).
func labelProviders(cfg *config.Providers, po provider.Options) ([]provider.Provider, error) {
	var out []provider.Provider
	add := func(p provider.Provider, err error) error {
		if err != nil {
			return err // names the option already
		}
		out = append(out, p)
		return nil
	}
	if c := cfg.Docker; c != nil {
		if err := add(docker.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.ConsulCatalog; c != nil {
		if err := add(consulcatalog.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.KubernetesCRD; c != nil {
		if err := add(kubernetescrd.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.Swarm; c != nil {
		if err := add(swarm.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.HTTP; c != nil {
		if err := add(httpprovider.New(c, po)); err != nil {
			return nil, err
		}
	}
	// KV stores: one provider each (Consul: one per namespace).
	if c := cfg.Consul; c != nil {
		ps, err := kvconsul.New(c, po)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, p)
		}
	}
	if c := cfg.Etcd; c != nil {
		if err := add(kvetcd.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.Redis; c != nil {
		if err := add(kvredis.New(c, po)); err != nil {
			return nil, err
		}
	}
	if c := cfg.ZooKeeper; c != nil {
		if err := add(kvzookeeper.New(c, po)); err != nil {
			return nil, err
		}
	}
	return out, nil
}
