// Package examples holds ringlb's example configs, Prometheus rules,
// Kubernetes manifests and the demo upstream (examples/upstream). It has no
// code of its own: its tests check that every example stays valid against
// the config loader, promtool and the repository's Dockerfile.
package examples
