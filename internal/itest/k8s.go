package itest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// KubeAssets returns the folder holding the etcd and kube-apiserver that
// scripts/k8s.sh builds (the layout KUBEBUILDER_ASSETS names): that
// variable's folder, else the newest complete build in the script's cache;
// or an error that says how to get them. The Kubernetes CRD provider's tests
// run both; the etcd provider's tests run that etcd.
func KubeAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		for _, b := range []string{"etcd", "kube-apiserver"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: %w", dir, b, err)
			}
		}
		return dir, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	// The most recent complete build in scripts/k8s.sh's cache.
	matches, _ := filepath.Glob(filepath.Join(cache, "tollgate", "k8s-*", ".complete"))
	var newest string
	var newestTime time.Time
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.ModTime().After(newestTime) {
			newest, newestTime = filepath.Dir(m), fi.ModTime()
		}
	}
	if newest != "" {
		return newest, nil
	}
	return "", errors.New("etcd and kube-apiserver not found: run `export KUBEBUILDER_ASSETS=$(scripts/k8s.sh)` (builds them once, several minutes)")
}
