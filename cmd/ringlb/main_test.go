package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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

// validate reads the hold cookie's secret file (beside the config) and
// reports on it without printing a secret.
func TestValidateHold(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("x", 40)
	cfg := writeConfig(t, "hold:\n  idle: 10m\n  cookie: {name: ringlb_hold, secret_file: hold.secret}\n"+upstreamsYAML(2))
	code, _, errOut := runCmd(t, "validate", "-config", cfg)
	if code != exitFail || !strings.Contains(errOut, cfg+`:3: hold.cookie.secret_file: "hold.secret": cannot read: no such file or directory`) {
		t.Fatalf("without the secret file: exit %d, stderr %q", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg), "hold.secret"), []byte(secret+"\n"+secret+"-old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "validate", "-config", cfg)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasSuffix(out, ", hold idle 10m0s max_keys 1000000, cookie ringlb_hold (2 secrets)\n") || strings.Contains(out, "s3cr3t") {
		t.Errorf("summary = %q", out)
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

// With hold on, simulate says how many keys move at once without it and
// that with it only keys of removed upstreams (and keys beyond max_keys)
// do; the rest move as they go idle.
func TestSimulateHold(t *testing.T) {
	cfg := writeConfig(t, "hold: {idle: 10m}\n"+upstreamsYAML(4))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-add", "app-5")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	moved := simFigure(t, out, "keys moved (ring):")
	if got := simFigure(t, out, "keys moved at once without hold:"); got != moved || moved < 15 {
		t.Errorf("without hold %.2f%%, want the ring's %.2f%% (about 20%%)", got, moved)
	}
	if got := simFigure(t, out, "keys moved at once with hold:"); got != 0 {
		t.Errorf("adding an upstream with hold moves %.2f%% at once, want 0", got)
	}
	if got := simFigure(t, out, "keys held, moving as they go idle:"); got != moved {
		t.Errorf("held %.2f%%, want %.2f%%", got, moved)
	}
	if !strings.Contains(out, "used at least every 10m0s") {
		t.Errorf("output does not say keys move once idle:\n%s", out)
	}

	// Removing app-2 and adding app-5: app-2's keys move at once, the keys
	// app-5 takes from the others are held.
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-add", "app-5", "-remove", "app-2")
	moved = simFigure(t, out, "keys moved (ring):")
	atOnce, held := simFigure(t, out, "keys moved at once with hold:"), simFigure(t, out, "keys held, moving as they go idle:")
	m := regexp.MustCompile(`(?m)^app-2\s+1\s+160\s+\d+\s+([0-9.]+)%`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no share of app-2 in:\n%s", out)
	}
	share, _ := strconv.ParseFloat(m[1], 64)
	if atOnce != share || held < 10 || math.Abs(atOnce+held-moved) > 0.011 {
		t.Errorf("at once %.2f%% (want app-2's share %.2f%%), held %.2f%%, of %.2f%% moved:\n%s", atOnce, share, held, moved, out)
	}
	if !strings.Contains(out, "of removed upstreams") {
		t.Errorf("output does not say why keys move at once:\n%s", out)
	}

	// max_keys smaller than the keys in use: only that share is held.
	cfg = writeConfig(t, "hold: {idle: 10m, max_keys: 50000}\n"+upstreamsYAML(4))
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-add", "app-5")
	moved = simFigure(t, out, "keys moved (ring):")
	if held := simFigure(t, out, "keys held, moving as they go idle:"); math.Abs(held-moved/2) > 0.011 {
		t.Errorf("max_keys half the keys: held %.2f%%, want half of %.2f%%", held, moved)
	}

	// Hold off: no hold section.
	cfg = writeConfig(t, upstreamsYAML(4))
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "1000", "-add", "app-5")
	if strings.Contains(out, "with hold") {
		t.Errorf("hold section printed with hold off:\n%s", out)
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
