//go:build unix

package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// End-to-end tests: the churn demo script, and a real Prometheus scraping
// a real ringlb process.

// startGroup starts cmd in its own process group and arranges for the
// whole group to be killed when the test ends, so nothing it started
// outlives the test.
func startGroup(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	p := &process{done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit 10s after SIGKILL", cmd.Path)
		}
	})
	return p
}

// process is a started command: done is closed when it has exited, and
// then err holds cmd.Wait's result.
type process struct {
	done chan struct{}
	err  error
}

// TestChurnScript runs examples/churn.sh, which exits non-zero if a user
// moved who should not have, or did not move back or to a newcomer when it
// should have.
func TestChurnScript(t *testing.T) {
	// Timings vary from run to run.
	timing := regexp.MustCompile(`\d+\.\ds`)
	runScript(t, "churn.sh", "CHURN_PORT_BASE", "OK: affinity held", func(s string) string {
		return timing.ReplaceAllString(s, "N.Ns")
	})
}

// scriptOutput runs examples/SCRIPT with bash on ports from portBase (the
// script's port variable) and env added to the environment, and returns
// what it printed and how it exited. It skips without bash or curl, and
// in -short mode.
func scriptOutput(t *testing.T, script, portBase string, env ...string) (*bytes.Buffer, error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s builds ringlb and runs processes", script)
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipExternal(t, tool, "not on PATH")
		}
	}
	goBin := goTool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		fmt.Sprintf("%s=%d", portBase, reservePortBase(t, 12)),
		"TMPDIR="+t.TempDir(),
	)
	cmd.Env = append(cmd.Env, env...)
	// On timeout the script gets SIGTERM and cleans up after itself;
	// startGroup's cleanup kills whatever is left.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p := startGroup(t, cmd)
	<-p.done
	if p.err != nil && ctx.Err() != nil {
		return &out, fmt.Errorf("%w (%v)", p.err, ctx.Err())
	}
	return &out, p.err
}

// runScript runs the example script (which listens on BASE+1..BASE+9 of
// the port base in env var portBase) and fails the test if it fails or
// does not print ok. The docs quote lines of the script's output (the
// page scriptDocs names): each must be a line it printed, once both go
// through norm (for what varies from run to run).
func runScript(t *testing.T, script, portBase, ok string, norm func(string) string) {
	start := time.Now()
	out, err := scriptOutput(t, script, portBase)
	if err != nil {
		t.Fatalf("bash examples/%s: %v (after %v)\n%s", script, err, time.Since(start).Round(time.Millisecond), out.Bytes())
	}
	if !strings.Contains(out.String(), ok) {
		t.Fatalf("%s exited 0 without saying %q:\n%s", script, ok, out.Bytes())
	}
	doc, quoted := scriptQuote(t, script)
	got := norm(out.String())
	for _, line := range strings.Split(norm(quoted), "\n") {
		if line != "" && !strings.Contains(got, line+"\n") {
			t.Errorf("%s quotes %q; %s printed no such line", doc, line, script)
		}
	}
	t.Logf("%s passed in %v:\n%s", script, time.Since(start).Round(time.Millisecond), out.Bytes())
}

// prometheusPath finds the Prometheus server. Without it the test fails
// under CI (env CI set) and is skipped elsewhere.
func prometheusPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/prometheus"); serr == nil {
			return "/usr/bin/prometheus"
		}
		testenv.SkipExternal(t, "prometheus", "not on PATH (Debian: apt-get install prometheus)")
	}
	return p
}

// lineWaiter is a process's output: it keeps it, and sends the first
// submatch of re on any complete line to found.
type lineWaiter struct {
	re    *regexp.Regexp
	found chan string

	mu   sync.Mutex
	buf  bytes.Buffer
	seen int // bytes of buf already matched
}

func watchLines(re *regexp.Regexp) *lineWaiter {
	return &lineWaiter{re: re, found: make(chan string, 1)}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		rest := w.buf.Bytes()[w.seen:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		if m := w.re.FindSubmatch(rest[:i]); m != nil {
			select {
			case w.found <- string(m[1]):
			default:
			}
		}
		w.seen += i + 1
	}
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// promQuery is the part of /api/v1/query's answer the test reads.
type promQuery struct {
	Status string `json:"status"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// TestPrometheusScrapesRinglb starts a ringlb process in front of three
// upstreams and a real Prometheus server scraping its admin listener
// every second, and waits until Prometheus holds ringlb_upstream_available
// for every upstream and ringlb_ring_info for the ring's version.
func TestPrometheusScrapesRinglb(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts ringlb and Prometheus")
	}
	prom := prometheusPath(t)
	dir := t.TempDir() // before startGroup: its cleanups run first
	bin := ringlbBinary(t)

	names := []string{"app-a", "app-b", "app-c"}
	var cfg strings.Builder
	cfg.WriteString("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nupstreams:\n")
	for _, n := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, n+"\n")
		}))
		t.Cleanup(srv.Close)
		fmt.Fprintf(&cfg, "  - name: %s\n    url: %s\n", n, srv.URL)
	}
	cfg.WriteString("health:\n  path: /healthz\n  interval: 500ms\n  timeout: 250ms\n")
	cfgPath := filepath.Join(dir, "ringlb.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	// ringlb, on ports it picks; its log says which.
	rl := exec.Command(bin, "serve", "-config", cfgPath)
	logs := watchLines(regexp.MustCompile(`msg="ringlb serving".* admin_listen=(\S+)`))
	rl.Stdout, rl.Stderr = logs, logs
	rlProc := startGroup(t, rl)
	var adminAddr string
	select {
	case <-rlProc.done:
		t.Fatalf("ringlb exited: %v\n%s", rlProc.err, logs)
	case adminAddr = <-logs.found:
	case <-time.After(20 * time.Second):
		t.Fatalf("ringlb did not log its admin address within 20s:\n%s", logs)
	}
	res, err := http.Get("http://" + adminAddr + "/debug/ring")
	if err != nil {
		t.Fatalf("ringlb admin: %v\n%s", err, logs)
	}
	var ring struct{ Version string }
	err = json.NewDecoder(res.Body).Decode(&ring)
	res.Body.Close()
	if err != nil || ring.Version == "" {
		t.Fatalf("/debug/ring: %v, version %q", err, ring.Version)
	}

	// Prometheus, scraping ringlb's admin listener every second, on a
	// port it picks; its log says which.
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ringlb
    static_configs:
      - targets: [%q]
`, adminAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := exec.Command(prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:0", "--log.level=info")
	promOut := watchLines(regexp.MustCompile(`msg="Listening on".* address=(\S+)`))
	pr.Stdout, pr.Stderr = promOut, promOut
	prProc := startGroup(t, pr)
	var promAddr string
	select {
	case <-prProc.done:
		t.Fatalf("prometheus exited: %v\n%s", prProc.err, promOut)
	case promAddr = <-promOut.found:
	case <-time.After(20 * time.Second):
		t.Fatalf("prometheus did not log its address within 20s:\n%s", promOut)
	}

	query := func(q string) (promQuery, error) {
		var pq promQuery
		res, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return pq, err
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(&pq); err != nil {
			return pq, err
		}
		if pq.Status != "success" {
			return pq, fmt.Errorf("status %q", pq.Status)
		}
		return pq, nil
	}

	start := time.Now()
	var avail promQuery
	testenv.Eventually(t, 40*time.Second, func() error {
		select {
		case <-prProc.done:
			t.Fatalf("prometheus exited: %v\n%s", prProc.err, promOut)
		default:
		}
		var last string
		pq, err := query("ringlb_upstream_available")
		if err != nil {
			last = err.Error()
		} else {
			var got []string
			for _, r := range pq.Data.Result {
				got = append(got, r.Metric["upstream"])
			}
			slices.Sort(got)
			last = fmt.Sprintf("%+v", pq.Data.Result)
			if slices.Equal(got, names) {
				avail = pq
				return nil
			}
		}
		return fmt.Errorf("Prometheus has not scraped every upstream's ringlb_upstream_available: last answer %s\nprometheus:\n%s\nringlb:\n%s",
			last, promOut, logs)
	})
	for _, r := range avail.Data.Result {
		if len(r.Value) != 2 || r.Value[1] != "1" {
			t.Errorf("ringlb_upstream_available{upstream=%q} = %v, want 1", r.Metric["upstream"], r.Value)
		}
	}
	t.Logf("Prometheus had every upstream after %v", time.Since(start).Round(time.Millisecond))

	pq, err := query("ringlb_ring_info")
	if err != nil {
		t.Fatal(err)
	}
	if len(pq.Data.Result) != 1 || pq.Data.Result[0].Metric["version"] != ring.Version {
		t.Errorf("ringlb_ring_info in Prometheus: %+v, want one series with version %q", pq.Data.Result, ring.Version)
	}
}
