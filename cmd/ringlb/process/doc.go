// Package process runs a ringlb serving process: its listeners and TLS
// front, config reload and graceful shutdown.
package process
