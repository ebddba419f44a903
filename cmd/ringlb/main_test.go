package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/certs/certstest"
)

// runCmd runs a command line in-process and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// writeConfig writes a config file into a temporary directory.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ringlb.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreamsYAML lists n upstreams app-1..app-n on made-up loopback ports.
func upstreamsYAML(n int) string {
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: app-%d\n    url: http://127.0.0.1:%d\n", i, 19000+i)
	}
	return b.String()
}

func TestValidate(t *testing.T) {
	good := writeConfig(t, upstreamsYAML(4))
	code, out, errOut := runCmd(t, "validate", "-config", good)
	if code != exitOK {
		t.Fatalf("validate good config: exit %d, stderr %q", code, errOut)
	}
	if !regexp.MustCompile(`ok: 4 upstreams, 640 points, placement ringlb, version [0-9a-f]{12}\n$`).MatchString(out) {
		t.Errorf("summary = %q", out)
	}

	bad := writeConfig(t, `upstreams:
  - name: a
    url: http://127.0.0.1:1
  - name: b
    url: ftp://x
    weight: -2
ring:
  load_factor: 0.5
`)
	code, out, errOut = runCmd(t, "validate", "-config", bad)
	if code != exitFail {
		t.Fatalf("validate bad config: exit %d, want %d", code, exitFail)
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
	for _, want := range []string{
		bad + ":5: upstreams[1].url",
		bad + ":6: upstreams[1].weight: must be > 0, got -2",
		bad + ":8: ring.load_factor",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	code, _, errOut = runCmd(t, "validate", "-config", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != exitFail || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // substring of stdout
	}{
		{[]string{"nonsense"}, exitUsage, ""},
		{[]string{"validate", "-nope"}, exitUsage, ""},
		{[]string{"validate", "extra"}, exitUsage, ""},
		{[]string{"validate", "-h"}, exitOK, "-config"},
		{[]string{"simulate", "-h"}, exitOK, "-remove"},
		{[]string{"serve", "-h"}, exitOK, "-config"},
		{[]string{"demo", "-h"}, exitOK, "-config"},
		{[]string{"version"}, exitOK, "ringlb "},
		{[]string{"help"}, exitOK, "Usage:"},
	} {
		code, out, _ := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("ringlb %v: exit %d, stdout %q; want exit %d with %q", tc.args, code, out, tc.code, tc.out)
		}
	}
}

// simFigure extracts a percentage following label in simulate's output.
func simFigure(t *testing.T, out, label string) float64 {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(label) + `\s+([0-9.]+)%`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in output:\n%s", label, out)
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

func TestSimulateAddOne(t *testing.T) {
	cfg := writeConfig(t, upstreamsYAML(8))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "200000", "-add", "app-9")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	moved := simFigure(t, out, "keys moved (ring):")
	minimum := simFigure(t, out, "theoretical minimum:")
	modN := simFigure(t, out, "keys moved (hash mod N):")
	if minimum < 11.1 || minimum > 11.2 {
		t.Errorf("theoretical minimum %.2f%%, want 1/9", minimum)
	}
	if moved > minimum+1.5 {
		t.Errorf("ring moved %.2f%%, more than 1/9 + 1.5 points", moved)
	}
	if modN < 85 {
		t.Errorf("mod N moved %.2f%%, want about 89%%", modN)
	}
	// Every moved key went to the newcomer.
	if !regexp.MustCompile(`(?m)^\s*app-\d\s+app-9\s`).MatchString(out) ||
		regexp.MustCompile(`(?m)^\s*app-\d\s+app-[1-8]\s`).MatchString(out) {
		t.Errorf("moved keys should all go to app-9:\n%s", out)
	}
}

func TestSimulateRemove(t *testing.T) {
	cfg := writeConfig(t, upstreamsYAML(4))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-remove", "app-2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Only app-2's keys move.
	if regexp.MustCompile(`(?m)^\s*app-[134]\s+app-`).MatchString(out) {
		t.Errorf("keys of surviving upstreams moved:\n%s", out)
	}
	code, _, _ = runCmd(t, "simulate", "-config", cfg, "-remove", "nope")
	if code != exitUsage {
		t.Errorf("-remove of an unknown upstream: exit %d, want %d", code, exitUsage)
	}
	code, _, _ = runCmd(t, "simulate", "-config", cfg, "-add", "x=-1")
	if code != exitUsage {
		t.Errorf("-add with a bad weight: exit %d, want %d", code, exitUsage)
	}
}

// TestValidateShippedConfigs runs `ringlb validate` on every config a user
// may copy: the root config.yaml and examples/configs/*.yaml.
func TestValidateShippedConfigs(t *testing.T) {
	paths, err := filepath.Glob("../../examples/configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, p := range append(paths, "../../config.yaml") {
		code, out, errOut := runCmd(t, "validate", "-config", p)
		if code != exitOK || !strings.Contains(out, ": ok: ") {
			t.Errorf("ringlb validate -config %s: exit %d\n%s%s", p, code, out, errOut)
		}
	}
}

// TestValidateTLS: validate loads the certificate pair and says, with line
// and field, when it has expired or the key is not the certificate's.
func TestValidateTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	ca.Issue(t, certstest.Options{}).Write(t, dir, "good")
	ca.Issue(t, certstest.Options{}).Write(t, dir, "other")
	ca.Issue(t, certstest.Options{CommonName: "old", NotBefore: time.Now().AddDate(0, 0, -2), NotAfter: time.Now().AddDate(0, 0, -1)}).Write(t, dir, "old")
	ca.WriteCA(t, dir, "ca.pem")
	cfg := func(cert, key string) string {
		p := filepath.Join(dir, cert+"-"+key+".yaml")
		body := "tls:\n  cert_file: " + cert + ".crt\n  key_file: " + key + ".key\nupstream_tls: {ca_file: ca.pem}\n" + upstreamsYAML(1)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if code, out, errOut := runCmd(t, "validate", "-config", cfg("good", "good")); code != exitOK || !strings.Contains(out, ": ok: ") {
		t.Errorf("good pair: exit %d, %q %q", code, out, errOut)
	}
	p := cfg("old", "old")
	if code, _, errOut := runCmd(t, "validate", "-config", p); code != exitFail || !strings.HasPrefix(errOut, p+":2: tls.cert_file: certificate old expired at ") {
		t.Errorf("expired: exit %d, stderr %q", code, errOut)
	}
	p = cfg("good", "other")
	if code, _, errOut := runCmd(t, "validate", "-config", p); code != exitFail || !strings.HasPrefix(errOut, p+":3: tls.key_file: ") || !strings.Contains(errOut, "does not match the certificate") {
		t.Errorf("mismatched key: exit %d, stderr %q", code, errOut)
	}
}
