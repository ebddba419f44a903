package examples

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/certs/certstest"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// TestTLSExampleConfig loads tls/ringlb.yaml beside a pair made as its
// comments say (here by a test CA): the pair is found next to the file,
// and TLS 1.2 and HTTP/2 are on.
func TestTLSExampleConfig(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("tls", "ringlb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ringlb.yaml")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), "tls.cert_file") {
		t.Fatalf("without tls.crt beside it: %v; want a tls.cert_file problem", err)
	}
	certstest.NewCA(t).Issue(t, certstest.Options{}).Write(t, dir, "tls")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.TLS.CertFile != filepath.Join(dir, "tls.crt") || cfg.TLS.MinVersion != tls.VersionTLS12 || !cfg.HTTP2 || len(cfg.Expired) > 0 {
		t.Errorf("tls %+v, http2 %v, expired %v", cfg.TLS, cfg.HTTP2, cfg.Expired)
	}
}
