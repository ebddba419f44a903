package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// runCmd runs a command line in-process and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
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
	good := ringlbtest.WriteConfig(t, upstreamsYAML(4))
	code, out, errOut := runCmd(t, "validate", "-config", good)
	if code != exitOK {
		t.Fatalf("validate good config: exit %d, stderr %q", code, errOut)
	}
	if !regexp.MustCompile(`ok: 4 upstreams, 640 points, placement ringlb, version [0-9a-f]{12}\n$`).MatchString(out) {
		t.Errorf("summary = %q", out)
	}

	bad := ringlbtest.WriteConfig(t, `upstreams:
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

// validate checks a discovery block without resolving anything: the
// resolver it names (a UDP socket of this test) receives no query.
func TestValidateDiscovery(t *testing.T) {
	dns, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	good := ringlbtest.WriteConfig(t, fmt.Sprintf(`discovery:
  resolver: %s
  sources:
    - srv: _http._tcp.app.example
    - {host: cache.example, port: 8080}
upstreams: []
`, dns.LocalAddr()))
	code, out, errOut := runCmd(t, "validate", "-config", good)
	if code != exitOK {
		t.Fatalf("validate discovery config: exit %d, stderr %q", code, errOut)
	}
	want := good + ": ok: 0 upstreams, 0 points, placement ringlb, discovery every 5s from srv _http._tcp.app.example, host cache.example:8080" +
		" (not resolved: the ring version depends on the answers)\n"
	if out != want {
		t.Errorf("summary:\ngot  %q\nwant %q", out, want)
	}
	// Loopback delivers a datagram before the send returns, so a query
	// would already be waiting.
	dns.SetReadDeadline(time.Now())
	if n, from, err := dns.ReadFrom(make([]byte, 512)); err == nil {
		t.Errorf("validate sent the resolver %d bytes from %v", n, from)
	}

	bad := ringlbtest.WriteConfig(t, "ring: {placement: nginx}\ndiscovery:\n  timeout: 9s\n  sources: [{host: a.example}]\n")
	code, out, errOut = runCmd(t, "validate", "-config", bad)
	if code != exitFail || out != "" {
		t.Fatalf("validate bad discovery config: exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		bad + ":2: discovery: needs placement ringlb",
		bad + ":3: discovery.timeout: must be < discovery.interval (5s), got 9s",
		bad + ":4: discovery.sources[0].port: required with host",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// validate reads the hold cookie's secret file (beside the config) and
// reports on it without printing a secret.
func TestValidateHold(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("x", 40)
	cfg := ringlbtest.WriteConfig(t, "hold:\n  idle: 10m\n  cookie: {name: ringlb_hold, secret_file: hold.secret}\n"+upstreamsYAML(2))
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
	want := regexp.MustCompile("^" + regexp.QuoteMeta(cfg+": ok: 2 upstreams, 320 points, placement ringlb, hold idle 10m0s max_keys 1000000, cookie ringlb_hold (2 secrets), version ") + "[0-9a-f]{12}\n$")
	if !want.MatchString(out) || strings.Contains(out, "s3cr3t") {
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
		{[]string{"validate", "one.yaml", "two.yaml"}, exitUsage, ""},
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

// flagLine matches a flag in a command's -h: "  -name ...".
var flagLine = regexp.MustCompile(`(?m)^  -([a-z]+)`)

// ringlb -h lists every flag of every command (as the commands' own -h
// show them), and a command without flags prints no empty "Flags:".
func TestUsageListsEveryFlag(t *testing.T) {
	_, top, _ := runCmd(t, "-h")
	for _, cmd := range []string{"serve", "validate", "simulate", "demo", "version"} {
		code, out, _ := runCmd(t, cmd, "-h")
		if code != exitOK {
			t.Errorf("ringlb %s -h: exit %d", cmd, code)
		}
		flags := flagLine.FindAllStringSubmatch(out, -1)
		for _, f := range flags {
			if !strings.Contains(top, "-"+f[1]) {
				t.Errorf("ringlb -h does not list %s's -%s:\n%s", cmd, f[1], top)
			}
		}
		if strings.Contains(out, "Flags:") && len(flags) == 0 {
			t.Errorf("ringlb %s -h prints an empty Flags: list:\n%s", cmd, out)
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
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(8))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "200000", "-add", "app-9")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	moved := simFigure(t, out, "keys moved (ring):")
	minimum := simFigure(t, out, "least possible (ideal shares):")
	least := simFigure(t, out, "least possible (these shares):")
	modN := simFigure(t, out, "keys moved (hash mod N):")
	if minimum < 11.1 || minimum > 11.2 {
		t.Errorf("least possible with ideal shares %.2f%%, want 1/9", minimum)
	}
	// Every moved key went to the newcomer, so the ring moved exactly what
	// the shares it produced force.
	if least != moved {
		t.Errorf("least possible for the measured shares %.2f%%, ring moved %.2f%%: want equal", least, moved)
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
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(4))
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
	cfg := ringlbtest.WriteConfig(t, "hold: {idle: 10m}\n"+upstreamsYAML(4))
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
	cfg = ringlbtest.WriteConfig(t, "hold: {idle: 10m, max_keys: 50000}\n"+upstreamsYAML(4))
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-add", "app-5")
	moved = simFigure(t, out, "keys moved (ring):")
	if held := simFigure(t, out, "keys held, moving as they go idle:"); math.Abs(held-moved/2) > 0.011 {
		t.Errorf("max_keys half the keys: held %.2f%%, want half of %.2f%%", held, moved)
	}

	// Hold off: no hold section.
	cfg = ringlbtest.WriteConfig(t, upstreamsYAML(4))
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "1000", "-add", "app-5")
	if strings.Contains(out, "with hold") {
		t.Errorf("hold section printed with hold off:\n%s", out)
	}
}

// TestValidateShippedConfigs runs `ringlb validate` on every config a user
// may copy: the root config.yaml and examples/configs/*.yaml (one with a
// tls block from a copy with a generated pair: see shippedConfig).
func TestValidateShippedConfigs(t *testing.T) {
	paths, err := filepath.Glob("../../examples/configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, p := range append(paths, "../../config.yaml") {
		code, out, errOut := runCmd(t, "validate", "-config", shippedConfig(t, p))
		if code != exitOK || !strings.Contains(out, ": ok: ") {
			t.Errorf("ringlb validate -config %s: exit %d\n%s%s", p, code, out, errOut)
		}
	}
}

// docs/routing.md quotes `./ringlb simulate -add app-5` on config.yaml:
// the quoted lines must be what the command prints.
func TestDocsQuoteSimulate(t *testing.T) {
	readme, err := os.ReadFile("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "simulate", "-config", "../../config.yaml", "-add", "app-5")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile("(?s)`./ringlb simulate -add app-5`.*?\n```\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/routing.md quotes no simulate output after `./ringlb simulate -add app-5`")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("docs/routing.md quotes %q; simulate printed:\n%s", line, out)
		}
	}
}

// simulate -add and -remove take what the config would take, and anything
// else is bad usage (exit 2) with a message naming the flag.
func TestSimulateChangeValidation(t *testing.T) {
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(2))
	nginx := ringlbtest.WriteConfig(t, "ring: {placement: nginx}\n"+upstreamsYAML(2))
	for _, tc := range []struct {
		cfg  string
		args []string
		code int
		msg  string
	}{
		{cfg, []string{"-add", "bad name"}, exitUsage, `-add bad name: a name must use only letters, digits and "-_.:"`},
		{cfg, []string{"-add", "a/b"}, exitUsage, "-add a/b: a name must use only"},
		{cfg, []string{"-add", "a#1"}, exitUsage, "-add a#1: a name must use only"},
		{cfg, []string{"-add", "=2"}, exitUsage, "-add =2: empty name"},
		{cfg, []string{"-add", "x=0"}, exitUsage, "weight must be a number > 0"},
		{cfg, []string{"-add", "x=abc"}, exitUsage, "weight must be a number > 0"},
		{cfg, []string{"-add", "x=0.001"}, exitUsage, "-add x=0.001: weight too small: round(160 × 0.001) = 0 ring points"},
		{cfg, []string{"-add", "x=1e9"}, exitUsage, "weight too large"},
		{cfg, []string{"-add", "app-1"}, exitUsage, "exists already"},
		{cfg, []string{"-remove", "nope"}, exitUsage, "-remove nope: no such upstream"},
		{cfg, []string{"-remove", "app-1", "-remove", "app-2"}, exitUsage, "leaves no upstream"},
		{cfg, []string{"-add", "app-3=0.5", "-add", "x.y:z_1"}, exitOK, ""},
		{nginx, []string{"-add", "bad name"}, exitUsage, "under placement nginx the name is the new upstream's host[:port]"},
		{nginx, []string{"-add", "127.0.0.1:99999"}, exitUsage, "host[:port]"},
		{nginx, []string{"-add", "127.0.0.1:9=1.5"}, exitUsage, "whole number"},
		{nginx, []string{"-add", "127.0.0.1:19001"}, exitUsage, "exists already"},
		{nginx, []string{"-add", "10.0.0.9:8080=2"}, exitOK, ""},
	} {
		args := append([]string{"simulate", "-keys", "100", "-config", tc.cfg}, tc.args...)
		code, _, errOut := runCmd(t, args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("simulate %v: exit %d, stderr %q; want exit %d with %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

func TestVersionString(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"dev", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20260102150405-0123456789ab+dirty"},
			Settings: settings("vcs", "git", "vcs.revision", rev, "vcs.modified", "true")},
			"v0.0.0-20260102150405-0123456789ab+dirty (revision 0123456789ab, modified, go1.26.0)"},
		{"dev", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "false")},
			"dev (revision 0123456789ab, go1.26.0)"},
		{"v1.2.0", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev)},
			"v1.2.0 (revision 0123456789ab, go1.26.0)"},
		{"v1.2.0", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "v1.2.0 (go1.26.0)"},
		{"dev", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			"dev (no VCS revision: built by go run, with -buildvcs=false or outside a git checkout; go1.26.0)"},
		{"dev", nil, "dev"},
	} {
		if got := versionString(tc.stamped, tc.bi); got != tc.want {
			t.Errorf("versionString(%q, ...) = %q, want %q", tc.stamped, got, tc.want)
		}
	}
}

func TestHelpAndVersionFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}} {
		code, out, _ := runCmd(t, args...)
		if code != exitOK {
			t.Errorf("ringlb %v: exit %d", args, code)
		}
		for _, cmd := range []string{"serve", "validate", "simulate", "demo", "version"} {
			if !strings.Contains(out, "ringlb "+cmd) {
				t.Errorf("ringlb %v does not list the command %s:\n%s", args, cmd, out)
			}
		}
	}
	if code, out, errOut := runCmd(t, "version", "-h"); code != exitOK || !strings.Contains(out, "Usage: ringlb version") {
		t.Errorf("ringlb version -h: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := runCmd(t, "version", "extra"); code != exitUsage {
		t.Errorf("ringlb version extra: exit %d, want %d", code, exitUsage)
	}
	if code, out, _ := runCmd(t, "version"); code != exitOK || !strings.HasPrefix(out, "ringlb ") {
		t.Errorf("ringlb version: exit %d, %q", code, out)
	}
}

// TestConfigAsArgument: validate, simulate and serve take the config file
// as their one positional argument, before or after the flags, as other
// tools' users type it; given twice, differently, it is bad usage.
func TestConfigAsArgument(t *testing.T) {
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(4))
	code, out, errOut := runCmd(t, "validate", cfg)
	if code != exitOK || !strings.HasPrefix(out, cfg+": ok: 4 upstreams") {
		t.Errorf("validate FILE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, flagOut, _ := runCmd(t, "validate", "-config", cfg)
	if flagOut != out {
		t.Errorf("validate FILE printed %q, validate -config FILE %q", out, flagOut)
	}
	if code, out, errOut := runCmd(t, "simulate", cfg, "-keys", "1000", "-add", "app-5"); code != exitOK || !strings.Contains(out, "1000 keys over 4 upstreams") || !strings.Contains(out, "keys moved (ring):") {
		t.Errorf("simulate FILE -keys 1000 -add app-5: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, "simulate", "-keys", "1000", cfg); code != exitOK || !strings.Contains(out, "1000 keys over 4 upstreams") {
		t.Errorf("simulate -keys 1000 FILE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "validate", "-config", cfg, cfg); code != exitOK {
		t.Errorf("validate -config FILE FILE: exit %d, stderr %q", code, errOut)
	}
	other := ringlbtest.WriteConfig(t, upstreamsYAML(2))
	if code, _, errOut := runCmd(t, "validate", "-config", other, cfg); code != exitUsage || !strings.Contains(errOut, "given twice") {
		t.Errorf("validate -config A B: exit %d, stderr %q; want %d, given twice", code, errOut, exitUsage)
	}
	if code, _, errOut := runCmd(t, "validate", filepath.Join(t.TempDir(), "missing.yaml")); code != exitFail || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("validate MISSING: exit %d, stderr %q; want %d naming the file", code, errOut, exitFail)
	}
	if code, _, errOut := runCmd(t, "simulate", cfg, "extra"); code != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("simulate FILE extra: exit %d, stderr %q", code, errOut)
	}
}

// TestVersionFlag: `ringlb --version` (and -version) is `ringlb version`.
func TestVersionFlag(t *testing.T) {
	_, want, _ := runCmd(t, "version")
	for _, f := range []string{"--version", "-version"} {
		if code, out, errOut := runCmd(t, f); code != exitOK || out != want {
			t.Errorf("ringlb %s: exit %d, stdout %q, stderr %q; want %q", f, code, out, errOut, want)
		}
	}
}

func TestValidateSingular(t *testing.T) {
	code, out, errOut := runCmd(t, "validate", "-config", ringlbtest.WriteConfig(t, upstreamsYAML(1)))
	if code != exitOK || !strings.Contains(out, ": ok: 1 upstream, 160 points") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
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

// An upstream that is ringlb's own listener is reported, not refused:
// validate warns and exits 0 (the serving process's test of the same
// name: serve warns when it starts and after each reload that keeps it).
func TestUpstreamLoopWarning(t *testing.T) {
	loop := "listen: 127.0.0.1:18089\nupstreams:\n  - name: me\n    url: http://localhost:18089\n  - name: other\n    url: http://127.0.0.1:18090\n"
	want := "upstreams[0] (me): http://localhost:18089 is ringlb's own listen address (127.0.0.1:18089): requests sent there come back into ringlb"
	path := ringlbtest.WriteConfig(t, loop)
	code, out, errOut := runCmd(t, "validate", "-config", path)
	if code != exitOK || !strings.Contains(out, "ok: 2 upstreams") || errOut != path+": warning: "+want+"\n" {
		t.Errorf("validate: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, _, errOut = runCmd(t, "validate", "-config", ringlbtest.WriteConfig(t, upstreamsYAML(2)))
	if code != exitOK || errOut != "" {
		t.Errorf("validate of an ordinary config: exit %d, stderr %q", code, errOut)
	}
}

// simulate -drain: the version stays, exactly the drained upstream's keys
// move for new traffic, none to it, and the hold message says which keys
// stay. Draining every upstream leaves new keys nowhere to go.
func TestSimulateDrain(t *testing.T) {
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(4))
	_, plain, _ := runCmd(t, "simulate", "-config", cfg, "-keys", "100000")
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-drain", "app-2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`(?m)^app-2\s+1\s+160\s+(\d+)\s`).FindStringSubmatch(plain)
	if m == nil {
		t.Fatalf("no share line for app-2:\n%s", plain)
	}
	if !strings.Contains(out, "keys moved for new traffic:  "+pct(atoi(t, m[1]), 100000)+"  ("+m[1]+" keys)") {
		t.Errorf("want app-2's %s keys moved for new traffic:\n%s", m[1], out)
	}
	version := regexp.MustCompile(`version ([0-9a-f]{12})\)`).FindStringSubmatch(plain)
	if version == nil || !strings.Contains(out, "the ring and its version ("+version[1]+") stay") {
		t.Errorf("the version should stay %v:\n%s", version, out)
	}
	if regexp.MustCompile(`(?m)^\s*app-[134]\s+app-`).MatchString(out) || regexp.MustCompile(`(?m)^\s*app-\d\s+app-2\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s*app-2\s+app-[134]\s`).MatchString(out) {
		t.Errorf("only app-2's keys should move, to the others:\n%s", out)
	}
	if !strings.Contains(out, "without hold no key is held") {
		t.Errorf("no word on hold:\n%s", out)
	}

	held := ringlbtest.WriteConfig(t, upstreamsYAML(4)+"hold: {idle: 30m}\n")
	if _, out, _ = runCmd(t, "simulate", "-config", held, "-keys", "1000", "-drain", "app-2"); !strings.Contains(out, "keys held on a draining upstream stay there") {
		t.Errorf("with hold:\n%s", out)
	}
	args := []string{"simulate", "-config", cfg, "-keys", "1000"}
	for i := 1; i <= 4; i++ {
		args = append(args, "-drain", fmt.Sprint("app-", i))
	}
	if _, out, _ = runCmd(t, args...); !strings.Contains(out, "keys with nowhere to go:     100.00%  (1000 keys: every upstream draining, new keys get 503)") {
		t.Errorf("every upstream draining:\n%s", out)
	}
	if code, _, _ = runCmd(t, "simulate", "-config", cfg, "-drain", "nope"); code != exitUsage {
		t.Errorf("-drain of an unknown upstream: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ = runCmd(t, "simulate", "-config", cfg, "-drain", "app-1", "-add", "app-9"); code != exitUsage {
		t.Errorf("-drain with -add: exit %d, want %d", code, exitUsage)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// docs/routing.md quotes what `./ringlb simulate -add app-5` says of hold
// on config.yaml, whose hold.idle is 30m.
func TestDocsQuoteSimulateHold(t *testing.T) {
	doc, err := os.ReadFile("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "simulate", "-config", "../../config.yaml", "-add", "app-5")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile("(?s)On `config.yaml`, whose `hold.idle` is 30m, `./ringlb simulate -add app-5` prints:\n\n```\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/routing.md quotes no simulate output with hold")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("docs/routing.md quotes %q; simulate printed:\n%s", line, out)
		}
	}
}

// docs/routing.md quotes `./ringlb simulate -drain app-2` on config.yaml.
func TestDocsQuoteSimulateDrain(t *testing.T) {
	readme, err := os.ReadFile("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "simulate", "-config", "../../config.yaml", "-drain", "app-2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile("(?s)`ringlb simulate -drain NAME`.*?\n```\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/routing.md quotes no simulate -drain output")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("docs/routing.md quotes %q; simulate printed:\n%s", line, out)
		}
	}
}

// simulate with handoff: after -add, every moved key's next request names
// its previous upstream (all of them stay members); after -remove, a key
// of the removed upstream names none; with -drain, each new key of the
// draining upstream names it. Without handoff the count is said as what
// handoff.header would do.
func TestSimulateHandoff(t *testing.T) {
	cfg := ringlbtest.WriteConfig(t, upstreamsYAML(4)+"handoff: {header: Ringlb-Handoff}\n")
	_, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-add", "app-5")
	moved := simFigure(t, out, "keys moved (ring):")
	if got := simFigure(t, out, "keys that carry a handoff:"); got != moved || moved == 0 {
		t.Errorf("-add: %.2f%% carry a handoff, %.2f%% moved; want equal:\n%s%s", got, moved, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^  from app-[1-4]:\s`).MatchString(out) || strings.Contains(out, "from app-5") {
		t.Errorf("-add: handoffs should come from app-1..4:\n%s", out)
	}
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-remove", "app-2")
	if got := simFigure(t, out, "keys that carry a handoff:"); got != 0 {
		t.Errorf("-remove app-2: %.2f%% carry a handoff, want 0 (only app-2's keys move, and it is gone):\n%s", got, out)
	}
	_, out, _ = runCmd(t, "simulate", "-config", cfg, "-keys", "100000", "-drain", "app-2")
	drained := simFigure(t, out, "keys moved for new traffic:")
	if got := simFigure(t, out, "keys that carry a handoff:"); got != drained || !strings.Contains(out, "  from app-2:") {
		t.Errorf("-drain app-2: %.2f%% carry a handoff, %.2f%% moved; want equal, from app-2:\n%s", got, drained, out)
	}
	off := ringlbtest.WriteConfig(t, upstreamsYAML(4))
	if _, out, _ = runCmd(t, "simulate", "-config", off, "-keys", "1000", "-add", "app-5"); !strings.Contains(out, "with handoff.header set, ") {
		t.Errorf("without handoff:\n%s", out)
	}
}
