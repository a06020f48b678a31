package itest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ConsulVersion is the agent scripts/consul.sh builds and caches.
const ConsulVersion = "1.14.11"

// ConsulBinary finds a Consul agent: $TOLLGATE_CONSUL, the binary that
// scripts/consul.sh caches, or consul on PATH. When none is there and
// integration tests are required, it runs scripts/consul.sh (a cold build
// takes minutes).
func ConsulBinary() (string, error) {
	if p := os.Getenv("TOLLGATE_CONSUL"); p != "" {
		return p, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	cached := filepath.Join(cache, "tollgate", "consul-"+ConsulVersion, "consul")
	if fi, err := os.Stat(cached); err == nil && fi.Mode()&0o111 != 0 {
		return cached, nil
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	if !Required() {
		return "", errors.New("no consul binary: run scripts/consul.sh (builds and caches it), put consul on PATH or set TOLLGATE_CONSUL")
	}
	out, err := exec.Command(filepath.Join(ModuleRoot(), "scripts", "consul.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("scripts/consul.sh: %w", err)
	}
	return string(bytes.TrimSpace(out)), nil
}
