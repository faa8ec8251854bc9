// Package check tests Sluice's Kubernetes deployment offline: the plain
// manifests of deploy/kubernetes and deploy/istio, and the Helm chart of
// deploy/helm/sluice rendered with each value set of its ci directory.
//
// Every object must decode strictly (no unknown or duplicate field, every
// value of its type) into the Go type of its kind: the Kubernetes API types
// of k8s.io/api, the Prometheus Operator's ServiceMonitor type, and Istio's
// EnvoyFilter type, whose Envoy patches must in turn decode strictly into
// Envoy's own types and pass their validation rules. The objects of one way
// of running Sluice must fit together (selectors, port names, probes, the
// restricted security context), and the config file that a Sluice pod would
// see, laid out as the kubelet writes a ConfigMap volume, must pass
// `sluice check-config`.
//
// It is a module of its own so that Sluice's module needs no Kubernetes
// dependency; helm is installed by deploy/helm/install-helm.sh, outside the
// repository.
package check
