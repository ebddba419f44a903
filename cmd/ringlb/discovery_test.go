package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// discView is /debug/ring with the discovery fields.
type discView struct {
	Version   string `json:"version"`
	Upstreams []struct {
		Name      string `json:"name"`
		URL       string `json:"url"`
		Source    string `json:"source"`
		Absent    bool   `json:"absent"`
		Available bool   `json:"available"`
		Health    string `json:"health"`
	} `json:"upstreams"`
	Discovery []struct {
		Source      string `json:"source"`
		Members     int    `json:"members"`
		LastSuccess string `json:"last_success"`
		LastError   string `json:"last_error"`
	} `json:"discovery"`
}

func getDiscView(t *testing.T, admin string) discView {
	t.Helper()
	res, err := ringlbtest.AdminClient.Get(admin + "/debug/ring")
	if err != nil {
		t.Fatalf("/debug/ring: %v", err)
	}
	defer res.Body.Close()
	var v discView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatalf("/debug/ring: %v", err)
	}
	return v
}

func memberCount(t *testing.T, admin string, n int) func() error {
	return func() error {
		if v := getDiscView(t, admin); len(v.Upstreams) != n {
			return fmt.Errorf("%d members, want %d: %+v", len(v.Upstreams), n, v)
		}
		return nil
	}
}

// statusOf GETs u with the key user-1 and returns the status.
func statusOf(t *testing.T, c *http.Client, u string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("X-User-ID", "user-1")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// Two ringlb processes reading the same DNS report the same ring version
// and send each of 10 000 keys to the same member.
func TestDiscoveryReplicasAgree(t *testing.T) {
	f := ringlbtest.NewDiscoveryFleet(t, 5)
	f.Publish(5)
	cfg := ringlbtest.WriteConfig(t, f.YAML("", ""))
	a, b := startRinglb(t, cfg), startRinglb(t, cfg)
	for _, lb := range []*lbProc{a, b} {
		testenv.Eventually(t, 15*time.Second, memberCount(t, lb.admin, 5))
	}
	va, vb := getDiscView(t, a.admin), getDiscView(t, b.admin)
	if va.Version != vb.Version {
		t.Fatalf("versions differ: %s and %s", va.Version, vb.Version)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	lookup := func(admin, key string) string {
		res, err := c.Get(admin + "/debug/lookup?key=" + url.QueryEscape(key))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var lr struct{ Chosen string }
		if err := json.NewDecoder(res.Body).Decode(&lr); err != nil {
			t.Fatal(err)
		}
		return lr.Chosen
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	disagree, per := 0, map[string]int{}
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < 10000; i += 4 {
				k := fmt.Sprintf("user-%d", i)
				ca, cb := lookup(a.admin, k), lookup(b.admin, k)
				mu.Lock()
				if ca != cb || ca == "" {
					disagree++
				}
				per[ca]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if disagree != 0 || len(per) != 5 {
		t.Errorf("%d of 10000 keys placed differently; per member %v", disagree, per)
	}
	// And requests follow: a sample through both proxies.
	for i := range 50 {
		k := fmt.Sprintf("user-%d", i)
		var got [2]string
		for j, lb := range []*lbProc{a, b} {
			req, _ := http.NewRequest(http.MethodGet, lb.proxy+"/", nil)
			req.Header.Set("X-User-ID", k)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			got[j] = res.Header.Get("X-Backend")
		}
		if got[0] != got[1] || got[0] == "" {
			t.Errorf("key %s: served by %q and %q", k, got[0], got[1])
		}
	}
}

// With `upstreams: []` and a source that has not answered, serve starts
// and answers 503 (and /readyz 503) until the first answer. Discovered
// members are health-checked.
func TestDiscoveryServeBeforeFirstAnswer(t *testing.T) {
	f := ringlbtest.NewDiscoveryFleet(t, 3)
	f.DNS.SetSilent(ringlbtest.FleetSRV, true)
	health := "health:\n  path: /healthz\n  interval: 200ms\n  timeout: 150ms\n  rise: 1\n  fall: 2\n"
	lb := startRinglb(t, ringlbtest.WriteConfig(t, f.YAML("", health)))
	c := &http.Client{Timeout: 5 * time.Second}
	if code := statusOf(t, c, lb.proxy+"/"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first answer: %d, want 503", code)
	}
	if code := statusOf(t, c, lb.admin+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("readyz before the first answer: %d, want 503", code)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if v := getDiscView(t, lb.admin); len(v.Discovery) != 1 || v.Discovery[0].LastError == "" {
			return fmt.Errorf("no failed query shown: %+v", v.Discovery)
		}
		return nil
	})

	f.Publish(3)
	f.DNS.SetSilent(ringlbtest.FleetSRV, false)
	testenv.Eventually(t, 10*time.Second, memberCount(t, lb.admin, 3))
	if code := statusOf(t, c, lb.admin+"/readyz"); code != 200 {
		t.Errorf("readyz after the first answer: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, lb.proxy+"/", nil)
	req.Header.Set("X-User-ID", "u1")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Backend") == "" {
		t.Errorf("after the first answer: %d from %q", res.StatusCode, res.Header.Get("X-Backend"))
	}

	// A discovered member whose health check fails is ejected.
	sick := f.Backends[1]
	sick.SetSick(true)
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, u := range getDiscView(t, lb.admin).Upstreams {
			if u.Name == sick.Name && (u.Health != "down" || u.Available) {
				return fmt.Errorf("%s: %+v", u.Name, u)
			}
		}
		return nil
	})
}

// SIGHUP and POST /reload re-read the discovery block and resolve at
// once; a bad block is rejected and the membership kept; removing the
// block leaves the static upstreams.
func TestDiscoveryReloadServe(t *testing.T) {
	f := ringlbtest.NewDiscoveryFleet(t, 4)
	f.Publish(3)
	static := ringlbtest.NewDiscoveredBackend(t, "static")
	staticYAML := "  - name: static\n    url: " + static.Srv.URL + "\n"
	body := strings.Replace(f.YAML(staticYAML, ""), "interval: 200ms", "interval: 1h", 1)
	body = strings.Replace(body, "timeout: 150ms", "timeout: 1s", 1)
	path := ringlbtest.WriteConfig(t, body)
	lb := startRinglb(t, path)
	testenv.Eventually(t, 10*time.Second, memberCount(t, lb.admin, 4))

	// A fourth target: with an interval of an hour only the reload's
	// immediate resolution can find it.
	f.Publish(4)
	if err := os.WriteFile(path, []byte(body+"  confirm: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lb.cmd.Process.Signal(syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, memberCount(t, lb.admin, 5))

	// A bad block: rejected, nothing changes.
	v := getDiscView(t, lb.admin).Version
	bad := strings.Replace(body, "timeout: 1s", "timeout: 2h", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ringlbtest.AdminClient.Post(lb.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "discovery.timeout") {
		t.Errorf("bad block: %d %s", res.StatusCode, msg)
	}
	if got := getDiscView(t, lb.admin); got.Version != v || len(got.Upstreams) != 5 || len(got.Discovery) != 1 {
		t.Errorf("after a rejected reload: %+v", got)
	}

	// No block: the static upstream alone, at once.
	noDisc := body[:strings.Index(body, "discovery:")]
	if err := os.WriteFile(path, []byte(noDisc), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = ringlbtest.AdminClient.Post(lb.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := getDiscView(t, lb.admin)
	if res.StatusCode != 200 || len(got.Upstreams) != 1 || got.Upstreams[0].Name != "static" || len(got.Discovery) != 0 {
		t.Errorf("after removing the block: %d %+v", res.StatusCode, got)
	}
}

// simulate resolves the discovery sources once and simulates over what
// they answered, beside the static upstreams; a source that does not
// answer is named, and with nothing found there is nothing to simulate.
func TestSimulateDiscovery(t *testing.T) {
	f := ringlbtest.NewDiscoveryFleet(t, 3)
	f.Publish(3)
	static := "  - name: app-static\n    url: http://127.0.0.1:1\n"
	// One poll must get its answer, however busy the machine.
	patient := strings.NewReplacer("interval: 200ms", "interval: 10s", "timeout: 150ms", "timeout: 5s")
	cfg := ringlbtest.WriteConfig(t, patient.Replace(f.YAML(static, "")))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "30000", "-add", "app-new")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "discovery: "+ringlbtest.FleetSRV+": 3 members\n") {
		t.Errorf("no report of the source's answer:\n%s", out)
	}
	if !strings.Contains(out, "30000 keys over 4 upstreams") {
		t.Errorf("want the static upstream and the 3 discovered ones on the ring:\n%s", out)
	}
	for _, be := range f.Backends {
		if !strings.Contains(out, be.Name) {
			t.Errorf("discovered member %s missing:\n%s", be.Name, out)
		}
	}
	if moved := simFigure(t, out, "keys moved (ring):"); moved < 14 || moved > 26 {
		t.Errorf("adding a fifth member moved %.2f%% of keys, want about 20%%", moved)
	}

	f.DNS.SetRcode(ringlbtest.FleetSRV, 2) // SERVFAIL
	cfg = ringlbtest.WriteConfig(t, patient.Replace(f.YAML("", "")))
	code, out, errOut = runCmd(t, "simulate", "-config", cfg, "-keys", "1000")
	if code != exitFail || !strings.Contains(out, "discovery: "+ringlbtest.FleetSRV+": no answer: ") ||
		!strings.Contains(errOut, "no upstreams, and discovery found no member: nothing to simulate") {
		t.Errorf("failing source, no static upstream: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
