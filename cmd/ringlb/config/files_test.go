package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// TestTLSFiles loads configs naming certificate, key and CA files made by
// a throwaway CA, and checks what each broken file is reported as.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	good := ca.Issue(t, certstest.Options{})
	good.Write(t, dir, "good")
	other := ca.Issue(t, certstest.Options{})
	other.Write(t, dir, "other")
	expired := ca.Issue(t, certstest.Options{CommonName: "old.example", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	expired.Write(t, dir, "expired")
	ca.WriteCA(t, dir, "ca.pem")
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("empty.pem", "")
	write("garbage.pem", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
	write("keyonly.pem", string(good.KeyPEM))
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.pem")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.pem"), 0o600); err != nil {
		t.Fatal(err)
	}

	load := func(t *testing.T, src string) (*Config, error) {
		t.Helper()
		p := filepath.Join(dir, "c.yaml")
		write("c.yaml", src)
		return Load(p)
	}
	cfgPath := filepath.Join(dir, "c.yaml")
	in := func(name string) string { return filepath.Join(dir, name) }

	t.Run("good pair relative to the config's directory", func(t *testing.T) {
		c, err := load(t, "tls:\n  cert_file: good.crt\n  key_file: good.key\n  min_version: \"1.3\"\nupstream_tls: {ca_file: ca.pem}\n"+up)
		if err != nil {
			t.Fatal(err)
		}
		want := &TLS{CertFile: in("good.crt"), KeyFile: in("good.key"), MinVersion: tls.VersionTLS13}
		if *c.TLS != *want {
			t.Errorf("TLS = %+v, want %+v", *c.TLS, *want)
		}
		if c.UpstreamTLS.CAFile != in("ca.pem") || len(c.Expired) != 0 || !c.HTTP2 || c.H2C {
			t.Errorf("UpstreamTLS = %+v, Expired = %v, HTTP2 = %v, H2C = %v", c.UpstreamTLS, c.Expired, c.HTTP2, c.H2C)
		}
	})
	t.Run("min_version defaults to 1.2", func(t *testing.T) {
		c, err := load(t, "tls: {cert_file: "+in("good.crt")+", key_file: good.key}\n"+up)
		if err != nil {
			t.Fatal(err)
		}
		if c.TLS.MinVersion != tls.VersionTLS12 || c.TLS.CertFile != in("good.crt") {
			t.Errorf("TLS = %+v", *c.TLS)
		}
	})
	t.Run("expired certificate loads and is noted", func(t *testing.T) {
		c, err := load(t, "listen: 127.0.0.1:8443\ntls:\n  cert_file: expired.crt\n  key_file: expired.key\n"+up)
		if err != nil {
			t.Fatal(err)
		}
		want := cfgPath + ":3: tls.cert_file: certificate old.example expired at " + expired.Cert.NotAfter.UTC().Format(time.RFC3339)
		if c.Expired.Error() != want {
			t.Errorf("Expired =\n%v\nwant\n%s", c.Expired, want)
		}
	})

	bad := []struct{ name, src, want string }{
		{"missing cert", "tls:\n  cert_file: nope.crt\n  key_file: good.key\n",
			":2: tls.cert_file: " + in("nope.crt") + ": cannot read: no such file or directory"},
		{"missing key", "tls:\n  cert_file: good.crt\n  key_file: nope.key\n",
			":3: tls.key_file: " + in("nope.key") + ": cannot read: no such file or directory"},
		{"directory", "tls:\n  cert_file: .\n  key_file: good.key\n",
			":2: tls.cert_file: " + dir + ": cannot read: not a regular file"},
		{"device", "tls:\n  cert_file: zero.pem\n  key_file: good.key\n",
			":2: tls.cert_file: " + in("zero.pem") + ": cannot read: not a regular file"},
		{"fifo", "tls:\n  cert_file: good.crt\n  key_file: fifo.pem\n",
			":3: tls.key_file: " + in("fifo.pem") + ": cannot read: not a regular file"},
		{"empty cert", "tls:\n  cert_file: empty.pem\n  key_file: good.key\n",
			":2: tls.cert_file: " + in("empty.pem") + ": no PEM certificate in it"},
		{"key as cert", "tls:\n  cert_file: keyonly.pem\n  key_file: good.key\n",
			":2: tls.cert_file: " + in("keyonly.pem") + ": no PEM certificate in it"},
		{"garbage cert", "tls:\n  cert_file: garbage.pem\n  key_file: good.key\n",
			":2: tls.cert_file: " + in("garbage.pem") + ": certificate 1: x509: malformed certificate"},
		{"cert as key", "tls:\n  cert_file: good.crt\n  key_file: good.crt\n",
			":3: tls.key_file: " + in("good.crt") + ": no PEM private key in it"},
		{"key of another certificate", "tls:\n  cert_file: good.crt\n  key_file: other.key\n",
			":3: tls.key_file: " + in("other.key") + ": does not match the certificate in " + in("good.crt")},
		{"missing CA", "upstream_tls:\n  ca_file: nope.pem\n",
			":2: upstream_tls.ca_file: " + in("nope.pem") + ": cannot read: no such file or directory"},
		{"CA without certificates", "upstream_tls:\n  ca_file: keyonly.pem\n",
			":2: upstream_tls.ca_file: " + in("keyonly.pem") + ": no PEM certificate in it"},
		{"CA with insecure_skip_verify", "upstream_tls:\n  ca_file: ca.pem\n  insecure_skip_verify: true\n",
			":3: upstream_tls.insecure_skip_verify: must be false with upstream_tls.ca_file, which it would ignore"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.src+up)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if want := cfgPath + tt.want; err.Error() != want {
				t.Errorf("error:\n%v\nwant\n%s", err, want)
			}
		})
	}
	t.Run("several at once, in line order", func(t *testing.T) {
		_, err := load(t, "upstream_tls: {ca_file: empty.pem}\ntls:\n  cert_file: nope.crt\n  key_file: good.key\n"+up)
		if err == nil || strings.Count(err.Error(), "\n") != 1 ||
			!strings.HasPrefix(err.Error(), cfgPath+":1: upstream_tls.ca_file: ") ||
			!strings.Contains(err.Error(), "\n"+cfgPath+":3: tls.cert_file: ") {
			t.Errorf("error:\n%v", err)
		}
	})
}
