// Package kubernetescrd is the Kubernetes CRD provider: it watches Traefik's
// traefik.io/v1alpha1 MiddlewareTCP and IngressRouteTCP custom resources, and
// the Services and EndpointSlices the routes name, in the configured
// namespaces, and emits one complete configuration on every change, like the
// Docker and Consul Catalog providers.
//
// The I/O (informers over the dynamic client) is in kubernetescrd.go; the
// pure translation, resources in and configuration out with names as in
// Traefik's kubernetescrd provider, is build in build.go. The CRD manifests,
// RBAC and a Deployment example are under deploy/.
package kubernetescrd
