package ringlbtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// AdminClient never keeps connections, so the admin listener holds none
// between polls and resource counts are comparable.
var AdminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

// RingView is GET /debug/ring as the tests read it.
type RingView struct {
	Version   string
	Upstreams []UpstreamState
}

// UpstreamState is one upstream of /debug/ring.
type UpstreamState struct {
	Name      string
	Available bool
	Health    string
	Breaker   string
	Inflight  int
}

// GetRing reads /debug/ring from the admin listener at admin (a base URL).
func GetRing(admin string) (RingView, error) {
	var v RingView
	res, err := AdminClient.Get(admin + "/debug/ring")
	if err != nil {
		return v, err
	}
	defer res.Body.Close()
	err = json.NewDecoder(res.Body).Decode(&v)
	return v, err
}

// MustGetRing is GetRing failing the test on an error.
func MustGetRing(t *testing.T, admin string) RingView {
	t.Helper()
	v, err := GetRing(admin)
	if err != nil {
		t.Fatalf("/debug/ring: %v", err)
	}
	return v
}

// RingState is name's state at /debug/ring; its absence fails the test.
func RingState(t *testing.T, admin, name string) UpstreamState {
	t.Helper()
	v := MustGetRing(t, admin)
	for _, u := range v.Upstreams {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("/debug/ring has no %s: %+v", name, v)
	return UpstreamState{}
}

// WaitState polls /debug/ring until ok accepts name's state.
func WaitState(t *testing.T, admin, name string, what string, ok func(UpstreamState) bool) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		if st := RingState(t, admin, name); !ok(st) {
			return fmt.Errorf("%s never became %s: %+v", name, what, st)
		}
		return nil
	})
}

// RingVersion is the ring version /debug/ring shows.
func RingVersion(t *testing.T, admin string) string {
	t.Helper()
	return MustGetRing(t, admin).Version
}

// MetricValue returns the value of the sample named exactly name (with
// its labels) at /metrics; NaN-free: it fails the test when absent.
func MetricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	_, body := Get(t, admin+"/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// InflightTotal sums ringlb_upstream_inflight over upstreams.
func InflightTotal(metrics string) int {
	total := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "ringlb_upstream_inflight{") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			total += int(v)
		}
	}
	return total
}
