//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/demo"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

var (
	listenRE      = regexp.MustCompile(`(?m)^(listen|admin_listen):[ \t]*\S+`)
	upstreamURLRE = regexp.MustCompile(`url: http://127\.0\.0\.1:\d+`)
)

// runDemo runs `ringlb demo` in-process on a copy of the config file src,
// the proxy and admin listeners on port 0 and the demo upstreams (which the
// demo binds at the addresses of their URLs) on reserved ports, and returns
// what it printed once it serves.
func runDemo(t *testing.T, src string) (intro string, stderr *testenv.Buffer) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	data = listenRE.ReplaceAll(data, []byte("$1: 127.0.0.1:0"))
	data = upstreamURLRE.ReplaceAllFunc(data, func([]byte) []byte {
		return []byte("url: http://" + ringlbtest.ReservePort(t))
	})
	path := ringlbtest.WriteConfig(t, string(data))
	ctx, cancel := context.WithCancel(context.Background())
	var stdout testenv.Buffer
	stderr = &testenv.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"demo", "-config", path}, &stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("demo exited %d after Ctrl-C, want 0", code)
			}
		case <-time.After(20 * time.Second):
			t.Error("demo did not stop")
		}
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		if strings.Contains(stdout.String(), "Press Ctrl-C to stop.") {
			return nil
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("demo exited %d:\n%s", code, stderr)
		default:
		}
		return fmt.Errorf("demo printed no hints within 20s:\n%s\n%s", stdout.String(), stderr)
	})
	return stdout.String(), stderr
}

// hint returns the command printed on the line after the one starting
// with label.
func hint(t *testing.T, intro, label string) string {
	t.Helper()
	lines := strings.Split(intro, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, label) && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	t.Fatalf("no hint %q in:\n%s", label, intro)
	return ""
}

func sh(t *testing.T, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

var visitLine = regexp.MustCompile(`^user (.+): visit (\d+) on (\S+)$`)

// introUpstreams are the upstreams the intro names: "ringlb demo: N
// stateful upstreams (a, b, c) behind ...".
var introUpstreams = regexp.MustCompile(`ringlb demo: \d+ stateful upstreams \(([^)]*)\)`)

// hintAfter returns the command on the line after the first line matching
// label.
func hintAfter(t *testing.T, intro string, label *regexp.Regexp) string {
	t.Helper()
	lines := strings.Split(intro, "\n")
	for i, l := range lines {
		if label.MatchString(l) && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	t.Fatalf("no hint matching %s in:\n%s", label, intro)
	return ""
}

// TestDemoHintsWork runs the demo on the repository's config and on every
// example config and runs the curl commands it prints: one user's visits
// keep counting on one upstream, /debug/lookup agrees on where that user
// goes, and under on_missing: reject a request without a key gets 400.
func TestDemoHintsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the demo and curl")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipExternal(t, tool, "not on PATH (the demo's hints are shell commands)")
		}
	}
	files, _ := filepath.Glob("../../examples/configs/*.yaml")
	files = append(files, "../../config.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, _, tls := shippedTLSFiles(t, f); tls {
				// Its pair is not shipped (TestValidateShippedConfigs
				// checks it with a generated one), and the hints are
				// plain-HTTP curl commands.
				t.Skip("a TLS config: the demo's hints speak plain HTTP")
			}
			if data, err := os.ReadFile(f); err != nil || !upstreamURLRE.Match(data) {
				// examples/configs/container.yaml names its upstreams by
				// host name, for a container network.
				t.Skip("no loopback upstreams: the demo starts its upstreams on loopback addresses only")
			}
			intro, _ := runDemo(t, f)
			out := sh(t, hint(t, intro, "Each user sticks to one upstream"))
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 {
				t.Fatalf("three visits gave:\n%s", out)
			}
			var upstream string
			for i, l := range lines {
				m := visitLine.FindStringSubmatch(l)
				if m == nil || m[2] != fmt.Sprint(i+1) || (upstream != "" && m[3] != upstream) {
					t.Fatalf("visit %d of one user: %q; want visit %d on one upstream\nall:\n%s", i+1, l, i+1, out)
				}
				upstream = m[3]
			}
			var lk struct{ Chosen string }
			if err := json.Unmarshal([]byte(sh(t, hint(t, intro, "Where would the key"))), &lk); err != nil || lk.Chosen != upstream {
				t.Errorf("the lookup hint says %q (%v); the user was served by %s", lk.Chosen, err, upstream)
			}
			// The ring hint answers the ring (with pools: of the pool the
			// intro is about).
			var ring struct {
				Version   string
				Upstreams []struct{ Name string }
			}
			ringHint, _, _ := strings.Cut(hint(t, intro, "The ring, its upstreams"), "    (status page")
			if out := sh(t, ringHint); json.Unmarshal([]byte(out), &ring) != nil || ring.Version == "" {
				t.Errorf("the ring hint answered %q", out)
			}
			// The users spread over the upstreams reach every one of them.
			m := introUpstreams.FindStringSubmatch(intro)
			if m == nil {
				t.Fatalf("the intro names no upstreams:\n%s", intro)
			}
			names := strings.Split(m[1], ", ")
			if !strings.Contains(intro, "every request from this machine has the key") && !strings.Contains(intro, "Every request from this machine") {
				served := map[string]bool{}
				for _, l := range strings.Split(strings.TrimSpace(sh(t, hintAfter(t, intro, regexp.MustCompile(`^(?:\d+|Eight) users spread over the upstreams`)))), "\n") {
					if m := visitLine.FindStringSubmatch(l); m != nil {
						served[m[3]] = true
					}
				}
				for _, n := range names {
					if len(names) <= 8 && !served[n] {
						t.Errorf("the users spread over the upstreams put none on %s (served: %v)", n, served)
					}
				}
			}
			// A cookie-less first visit says it has no user yet; then the
			// cookie's user counts from 1 on the same upstream.
			if strings.Contains(intro, "A client with no key gets the affinity cookie") {
				lines := strings.Split(strings.TrimSpace(sh(t, hintAfter(t, intro, regexp.MustCompile(`keep (?:the cookie|it) in a (?:cookie )?jar`)))), "\n")
				first := regexp.MustCompile(`^a visitor with no key yet: not counted, on (\S+)$`)
				if len(lines) != 3 || first.FindStringSubmatch(lines[0]) == nil {
					t.Fatalf("the cookie jar hint gave:\n%s", strings.Join(lines, "\n"))
				}
				on := first.FindStringSubmatch(lines[0])[1]
				for i, l := range lines[1:] {
					m := visitLine.FindStringSubmatch(l)
					if m == nil || m[2] != fmt.Sprint(i+1) || m[3] != on {
						t.Errorf("cookie jar visit %d: %q, want visit %d on %s\nall:\n%s", i+2, l, i+1, on, strings.Join(lines, "\n"))
					}
				}
			}
			if strings.Contains(intro, "gets 400") {
				if out := sh(t, hint(t, intro, "A request with none of those gets 400")); !strings.Contains(out, "missing hash key") {
					t.Errorf("the 400 hint answered %q", out)
				}
			}
			if !regexp.MustCompile(`It holds ports \d+ \(proxy\), \d+ \(admin\) and [\d, -]+ \(upstreams\)`).MatchString(intro) {
				t.Errorf("the intro does not say which ports it holds:\n%s", intro)
			}
		})
	}
}

// A second demo on ports that are taken says which port and by what.
func TestDemoBindErrorNamesThePort(t *testing.T) {
	taken := httptest.NewServer(demo.New("app-7"))
	defer taken.Close()
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+"upstreams:\n  - name: app-1\n    url: "+taken.URL+"\n")
	code, _, errOut := runCmd(t, "demo", "-config", path)
	_, port, _ := net.SplitHostPort(taken.Listener.Addr().String())
	if code != exitFail || !strings.Contains(errOut, "demo upstream app-1: port "+port+" on 127.0.0.1 is already in use by a ringlb demo upstream (app-7") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}

	// Something that accepts and says nothing.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	path = ringlbtest.WriteConfig(t, "listen: "+l.Addr().String()+"\nadmin_listen: 127.0.0.1:0\n"+upstreamsYAML(1))
	code, _, errOut = runCmd(t, "serve", "-config", path)
	_, port, _ = net.SplitHostPort(l.Addr().String())
	if code != exitFail || !strings.Contains(errOut, "listen: port "+port+" on 127.0.0.1 is already in use by a process that does not answer HTTP") {
		t.Errorf("serve: exit %d, stderr:\n%s", code, errOut)
	}
}

// With slow_start the heal hint says when the key is back, computed from
// the config (the readmission, then the key's point in the slow start's
// order), and it is back then: heal the upstream and time it.
func TestDemoSlowStartHint(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the demo, fails and heals an upstream")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipExternal(t, tool, "not on PATH (the demo's hints are shell commands)")
		}
	}
	// sessions-cookie.yaml's upstreams, keyed by a header, with quick
	// probes and a slow start long enough to tell the readmission from it.
	src := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(src, []byte(ringlbtest.Listeners+`upstream_header: X-Upstream
hash: {key: [header: X-User-ID], on_missing: reject}
ring: {slow_start: 8s}
upstreams:
  - {name: app-1, url: http://127.0.0.1:9001}
  - {name: app-2, url: http://127.0.0.1:9002}
  - {name: app-3, url: http://127.0.0.1:9003}
health: {interval: 200ms, timeout: 100ms, rise: 2, fall: 2}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	intro, _ := runDemo(t, src)
	heal := regexp.MustCompile(`(?m)^Heal it; .*slow_start 8s\n  it takes its keys back gradually, this one about (\S+) later: its users are back after about (\S+):\n  (curl .*/_demo/recover)$`).FindStringSubmatch(intro)
	if heal == nil {
		t.Fatalf("no slow-start heal hint in:\n%s", intro)
	}
	want, err := time.ParseDuration(heal[2])
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := time.ParseDuration(heal[1]); d < time.Second {
		t.Fatalf("the key comes back %s into the slow start: too soon to tell it from the readmission; pick another config", d)
	}
	visit := hint(t, intro, "Each user sticks to one upstream")
	visit = strings.Replace(strings.Replace(visit, "for i in 1 2 3; do ", "", 1), "; done", "", 1)
	owner := visitLine.FindStringSubmatch(strings.TrimSpace(sh(t, visit)))
	if owner == nil {
		t.Fatalf("%s gave no visit line", visit)
	}
	sh(t, hint(t, intro, "Make "+owner[3]))
	testenv.Eventually(t, 10*time.Second, func() error {
		if m := visitLine.FindStringSubmatch(strings.TrimSpace(sh(t, visit))); m == nil || m[3] == owner[3] {
			return fmt.Errorf("still served by %s", owner[3])
		}
		return nil
	})
	sh(t, heal[3])
	healed := time.Now()
	testenv.Eventually(t, want+10*time.Second, func() error {
		if m := visitLine.FindStringSubmatch(strings.TrimSpace(sh(t, visit))); m == nil || m[3] != owner[3] {
			return fmt.Errorf("not back on %s", owner[3])
		}
		return nil
	})
	// Readmission waits for the next probe (up to one interval, ±10%) and
	// the rise probes; the polling adds a little.
	took := time.Since(healed)
	if took < want-300*time.Millisecond || took > want+time.Second {
		t.Errorf("the hint says the key is back after about %s; it took %s", want, took.Round(100*time.Millisecond))
	}
	t.Logf("the hint said about %s; the key was back after %s", want, took.Round(10*time.Millisecond))
}

// With hold on and on_return stay (config.yaml), the heal hint does not
// promise the key back: used on another upstream while its own was out,
// it stays there until idle. Under home it comes back.
func TestDemoFailHintUnderStay(t *testing.T) {
	cfg, err := config.Load("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &cfg.Upstreams[0]
	if hint := demoFailHint(cfg, u, "alice", "curl ..."); !strings.Contains(hint, "stays there until idle for 30m0s (hold.on_return: stay") {
		t.Errorf("hint under on_return stay:\n%s", hint)
	}
	cfg.Hold.OnReturn = "home"
	if hint := demoFailHint(cfg, u, "alice", "curl ..."); !strings.Contains(hint, "its users are back") {
		t.Errorf("hint under on_return home:\n%s", hint)
	}
}
