package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// shippedTLSFiles returns the tls block's cert_file and key_file of the
// config file at path, or ok false when it has no tls block.
func shippedTLSFiles(t *testing.T, path string) (certFile, keyFile string, ok bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		TLS *struct {
			CertFile string `yaml:"cert_file"`
			KeyFile  string `yaml:"key_file"`
		} `yaml:"tls"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.TLS == nil {
		return "", "", false
	}
	return c.TLS.CertFile, c.TLS.KeyFile, true
}

// shippedConfig returns the path of a shipped config to check: path
// itself, or, for a config with a tls block, a copy in a temporary
// directory with a freshly issued pair at its cert_file and key_file. A
// shipped config names its pair relative to its own directory (where
// relative paths are read from), and keys are never checked in.
func shippedConfig(t *testing.T, path string) string {
	t.Helper()
	certFile, keyFile, ok := shippedTLSFiles(t, path)
	if !ok {
		return path
	}
	dir := t.TempDir()
	leaf := certstest.NewCA(t).Issue(t, certstest.Options{})
	for f, data := range map[string][]byte{certFile: leaf.CertPEM, keyFile: leaf.KeyPEM} {
		if f == "" || filepath.IsAbs(f) || strings.HasPrefix(filepath.Clean(f), "..") {
			t.Fatalf("%s: tls names %q; a shipped config names its pair relative to its own directory", path, f)
		}
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(cp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return cp
}
