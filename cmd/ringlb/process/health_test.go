package process

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/demo"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

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
	yaml.WriteString(ringlbtest.Listeners + "upstreams:\n")
	for i := 1; i <= 3; i++ {
		u := demo.New(fmt.Sprintf("app-%d", i))
		s := httptest.NewServer(u)
		t.Cleanup(s.Close)
		ups = append(ups, u)
		fmt.Fprintf(&yaml, "  - name: app-%d\n    url: %s\n", i, s.URL)
	}
	// Generous timeout: only app-2, told to, may fail its checks.
	health := "health:\n  interval: 250ms\n  timeout: 240ms\n  rise: 2\n  fall: 2\n"
	path := ringlbtest.WriteConfig(t, yaml.String()+health)
	r := startServe(t, path)
	isDown := func(st ringlbtest.UpstreamState) bool { return !st.Available && st.Health == "down" }
	isUp := func(st ringlbtest.UpstreamState) bool { return st.Available && st.Health == "up" }

	ups[1].FailHealth(true)
	ringlbtest.WaitState(t, r.admin, "app-2", "down", isDown)

	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadOK(t, r.admin)
	if st := ringlbtest.RingState(t, r.admin, "app-2"); !isUp(st) {
		t.Errorf("right after the reload without health checks: %+v", st)
	}

	if err := os.WriteFile(path, []byte(yaml.String()+health), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadOK(t, r.admin)
	ringlbtest.WaitState(t, r.admin, "app-2", "down again", isDown)
	ups[1].FailHealth(false)
	ringlbtest.WaitState(t, r.admin, "app-2", "up", isUp)

	_, metrics := ringlbtest.Get(t, r.admin+"/metrics")
	if want := `ringlb_ejections_total{pool="default",reason="health",upstream="app-2"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
	for _, name := range []string{"app-1", "app-3"} {
		if st := ringlbtest.RingState(t, r.admin, name); !isUp(st) {
			t.Errorf("%s: %+v", name, st)
		}
	}
}
