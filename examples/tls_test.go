package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"

	"gopkg.in/yaml.v3"

	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// tlsFiles returns the tls block's cert_file and key_file of the config
// file at path, or ok false when it has no tls block.
func tlsFiles(t *testing.T, path string) (certFile, keyFile string, ok bool) {
	t.Helper()
	var c struct {
		TLS *struct {
			CertFile string `yaml:"cert_file"`
			KeyFile  string `yaml:"key_file"`
		} `yaml:"tls"`
	}
	if err := yaml.Unmarshal(must(os.ReadFile(path)), &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.TLS == nil {
		return "", "", false
	}
	return c.TLS.CertFile, c.TLS.KeyFile, true
}

// withTLSPair returns path when the config there has no tls block. With
// one, it returns a copy of the config in a temporary directory with a
// freshly issued certificate and key at its cert_file and key_file: a
// shipped config names its pair relative to its own directory, and keys
// are never checked in.
func withTLSPair(t *testing.T, path string) string {
	t.Helper()
	certFile, keyFile, ok := tlsFiles(t, path)
	if !ok {
		return path
	}
	for _, f := range []string{certFile, keyFile} {
		if f == "" || filepath.IsAbs(f) || strings.HasPrefix(filepath.Clean(f), "..") {
			t.Fatalf("%s: tls names %q; a shipped config names its pair relative to its own directory", path, f)
		}
	}
	dir := t.TempDir()
	leaf := certstest.NewCA(t).Issue(t, certstest.Options{})
	for f, data := range map[string][]byte{certFile: leaf.CertPEM, keyFile: leaf.KeyPEM} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cp := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(cp, must(os.ReadFile(path)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestConfigsTLSExample: examples/configs/tls.yaml serves TLS with HTTP/2
// from a pair next to it, which is not checked in: without one it does not
// load, naming tls.cert_file; with one in its directory it does.
func TestConfigsTLSExample(t *testing.T) {
	path := filepath.Join("configs", "tls.yaml")
	certFile, keyFile, ok := tlsFiles(t, path)
	if !ok {
		t.Fatalf("%s has no tls block", path)
	}
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(filepath.Join("configs", f)); err == nil {
			t.Errorf("configs/%s exists: a key pair must not be shipped (make one as the file says)", f)
		}
	}
	// In a directory without the pair.
	bare := filepath.Join(t.TempDir(), "tls.yaml")
	if err := os.WriteFile(bare, must(os.ReadFile(path)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(bare); err == nil || !strings.Contains(err.Error(), "tls.cert_file") {
		t.Errorf("config.Load without the pair: %v, want an error naming tls.cert_file", err)
	}
	cfg, err := config.Load(withTLSPair(t, path))
	if err != nil {
		t.Fatalf("config.Load with a pair next to it: %v", err)
	}
	if cfg.TLS == nil || !cfg.HTTP2 || cfg.H2C {
		t.Errorf("tls %+v, http2 %v, h2c %v: want tls with http2 on", cfg.TLS, cfg.HTTP2, cfg.H2C)
	}
	for _, u := range cfg.Upstreams {
		if u.Protocol != transport.HTTP1 {
			t.Errorf("upstream %s: protocol %q, want http1 (HTTP/2 at the front only)", u.Name, u.Protocol)
		}
	}
}

// opensslLine matches the openssl command the TLS example and docs/protocols.md
// give for a self-signed pair, with its line continuations.
var opensslLine = regexp.MustCompile(`(?m)^[#\s]*(openssl req -x509 (?:.*\\\n[#\s]*)*.*)$`)

// TestConfigsTLSOpenSSL runs the openssl command that examples/configs/
// tls.yaml and docs/protocols.md give, in a copy of examples/configs, and loads
// the config with the pair it made: the recipe a user copies works.
func TestConfigsTLSOpenSSL(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		testenv.SkipExternal(t, "openssl", "not on PATH (Debian: apt-get install openssl)")
	}
	var cmds []string
	for _, f := range []string{filepath.Join("configs", "tls.yaml"), filepath.Join(repoRoot, "docs", "protocols.md")} {
		m := opensslLine.FindSubmatch(must(os.ReadFile(f)))
		if m == nil {
			t.Fatalf("%s gives no `openssl req -x509` command", f)
		}
		cmd := regexp.MustCompile(`\\\n[#\s]*`).ReplaceAllString(string(m[1]), "")
		cmds = append(cmds, cmd)
	}
	if cmds[0] != cmds[1] {
		t.Errorf("the openssl commands differ:\nconfigs/tls.yaml:  %s\ndocs/protocols.md: %s", cmds[0], cmds[1])
	}
	args := strings.Fields(cmds[0])[1:]
	root := t.TempDir()
	dir := filepath.Join(root, "examples", "configs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tls.yaml")
	if err := os.WriteFile(cfg, must(os.ReadFile(filepath.Join("configs", "tls.yaml"))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Dir = root // the command names paths from the repository's root
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[0], err, out)
	}
	if _, err := config.Load(cfg); err != nil {
		t.Fatalf("config.Load with the pair openssl made: %v", err)
	}
}
