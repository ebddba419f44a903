// Package examples holds ringlb's example configs, Prometheus rules,
// Kubernetes manifests, the demo upstream (examples/upstream) and the churn
// demo (churn.sh). It has no code of its own: its tests check that every
// example stays valid against the config loader, promtool and the
// repository's Dockerfile, run churn.sh, and have a real Prometheus scrape
// a real ringlb.
package examples
