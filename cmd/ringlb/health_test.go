package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/demo"
)

// upstreamState is one upstream of /debug/ring.
type upstreamState struct {
	Name      string
	Available bool
	Health    string
	Breaker   string
}

func ringState(t *testing.T, admin, name string) upstreamState {
	t.Helper()
	_, body := get(t, admin+"/debug/ring")
	var v struct{ Upstreams []upstreamState }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/debug/ring: %v: %s", err, body)
	}
	for _, u := range v.Upstreams {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("/debug/ring has no %s: %s", name, body)
	return upstreamState{}
}

// waitState polls /debug/ring until ok accepts name's state.
func waitState(t *testing.T, admin, name string, what string, ok func(upstreamState) bool) {
	t.Helper()
	eventually(t, 15*time.Second, func() error {
		if st := ringState(t, admin, name); !ok(st) {
			return fmt.Errorf("%s never became %s: %+v", name, what, st)
		}
		return nil
	})
}

func reloadOK(t *testing.T, admin string) {
	t.Helper()
	resp, err := http.Post(admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
}

// TestServeHealthChecks: serve runs the health block's checks against the
// upstreams; a reload that drops the block brings every upstream back at
// once, and one that restores it starts checking again.
func TestServeHealthChecks(t *testing.T) {
	var ups []*demo.Upstream
	var yaml strings.Builder
	yaml.WriteString(listenersYAML + "upstreams:\n")
	for i := 1; i <= 3; i++ {
		u := demo.New(fmt.Sprintf("app-%d", i))
		s := httptest.NewServer(u)
		t.Cleanup(s.Close)
		ups = append(ups, u)
		fmt.Fprintf(&yaml, "  - name: app-%d\n    url: %s\n", i, s.URL)
	}
	// Generous timeout: only app-2, told to, may fail its checks.
	health := "health:\n  interval: 250ms\n  timeout: 240ms\n  rise: 2\n  fall: 2\n"
	path := writeConfig(t, yaml.String()+health)
	r := startServe(t, path)
	isDown := func(st upstreamState) bool { return !st.Available && st.Health == "down" }
	isUp := func(st upstreamState) bool { return st.Available && st.Health == "up" }

	ups[1].FailHealth(true)
	waitState(t, r.admin, "app-2", "down", isDown)

	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadOK(t, r.admin)
	if st := ringState(t, r.admin, "app-2"); !isUp(st) {
		t.Errorf("right after the reload without health checks: %+v", st)
	}

	if err := os.WriteFile(path, []byte(yaml.String()+health), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadOK(t, r.admin)
	waitState(t, r.admin, "app-2", "down again", isDown)
	ups[1].FailHealth(false)
	waitState(t, r.admin, "app-2", "up", isUp)

	_, metrics := get(t, r.admin+"/metrics")
	if want := `ringlb_ejections_total{reason="health",upstream="app-2"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
	for _, name := range []string{"app-1", "app-3"} {
		if st := ringState(t, r.admin, name); !isUp(st) {
			t.Errorf("%s: %+v", name, st)
		}
	}
}
