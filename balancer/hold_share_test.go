package balancer

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/redistest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// shareTimeout is the lookup timeout of these tests: generous, so a busy
// machine under -race does not turn a slow answer into a miss.
const shareTimeout = 2 * time.Second

type replica struct {
	b     *Balancer
	reg   *prometheus.Registry
	front *httptest.Server
}

// replicas starts n balancers as replicas of one fleet: same options, each
// on its own clock c (all share it), hold on and, with srv, shared through it.
func replicas(t *testing.T, n int, c *fakeClock, opts Options, srv *redistest.Server, prefix string) []replica {
	t.Helper()
	if srv != nil {
		opts.Hold.Share = share.Options{Redis: srv.URL(), Prefix: prefix, Timeout: shareTimeout}
	}
	out := make([]replica, n)
	for i := range out {
		b, reg, front := holdProxy(t, c, opts)
		out[i] = replica{b, reg, front}
	}
	return out
}

// waitWritten waits until the replicas have written at least n records.
func waitWritten(t *testing.T, rs []replica, n uint64) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		var w uint64
		for _, r := range rs {
			w += r.b.hold.Counts.Written.Load()
		}
		if w < n {
			return fmt.Errorf("%d records written, want %d", w, n)
		}
		return nil
	})
}

// scaleOut runs the scenario of rule 14: keys served by one replica each,
// a scale-out on every replica, then each key's next request reaching a
// replica that never saw it. It returns how many keys in use moved, and
// the keys the new ring gives to the newcomer.
func scaleOut(t *testing.T, srv *redistest.Server, prefix string) (moved int, movers []string, rs []replica) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	e := newBackend(t, "e")
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	rs = replicas(t, 3, clk, opts, srv, prefix)

	live := keys("user-", 240)
	where := map[string]string{}
	for i, k := range live {
		where[k] = visit(t, rs[i%3].front, k)
	}
	if srv != nil {
		waitWritten(t, rs, uint64(len(live)))
	}
	clk.advance(time.Minute)
	opts.Upstreams = upstreamsOf(t, append(bes, e)...)
	for _, r := range rs {
		if srv != nil {
			opts.Hold.Share = share.Options{Redis: srv.URL(), Prefix: prefix, Timeout: shareTimeout}
		}
		if _, err := r.b.Update(opts); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range live {
		if rs[0].b.Lookup(k).Owner == "e" {
			movers = append(movers, k)
		}
		// The next request reaches the next replica, which never saw it.
		if got := visit(t, rs[(i+1)%3].front, k); got != where[k] {
			moved++
		}
	}
	if len(movers) < 20 {
		t.Fatalf("the new ring moves %d of %d keys; want about a fifth", len(movers), len(live))
	}
	return moved, movers, rs
}

// Rule 14: with share, a key in use stays on its upstream through a
// scale-out although its next request reaches a replica that never saw
// it; without share the same scenario moves the ring's movers.
func TestHoldShareScaleOut(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	moved, movers, rs := scaleOut(t, srv, "t1:")
	if moved != 0 {
		t.Errorf("with share: %d keys in use moved, want 0", moved)
	}
	var found float64
	for _, r := range rs {
		found += metric(t, r.reg, "ringlb_hold_share_lookups_total", "result=found")
	}
	if found != 240 {
		t.Errorf("lookups found = %v, want 240 (each key once, on the replica that never saw it)", found)
	}
	if n := metric(t, rs[0].reg, "ringlb_hold_share_errors_total"); n != 0 {
		t.Errorf("ringlb_hold_share_errors_total = %v", n)
	}
	t.Logf("with share: %d of 240 keys in use moved (%d movers by the new ring)", moved, len(movers))

	noShare, noMovers, _ := scaleOut(t, nil, "")
	if noShare == 0 || noShare != len(noMovers) {
		t.Errorf("without share: %d keys in use moved, want the ring's %d movers", noShare, len(noMovers))
	}
	t.Logf("without share: %d of 240 keys in use moved", noShare)

	// Records carry the key's hash, never the key.
	ks := srv.Do("KEYS", "t1:*")
	if len(ks) < 240 {
		t.Fatalf("%d keys in the store, want >= 240", len(ks))
	}
	for _, k := range ks {
		v := srv.Do("GET", k)
		if strings.Contains(k, "user-") || (len(v) > 0 && strings.Contains(v[0], "user-")) {
			t.Fatalf("the store holds a raw key: %s = %v", k, v)
		}
		if ttl := srv.Do("PTTL", k); len(ttl) != 1 || ttl[0] == "-1" {
			t.Fatalf("%s has no expiry (PTTL %v)", k, ttl)
		}
	}
}

// Steady state: once idle has passed since the ring version changed, no
// request asks the store, whatever its key.
func TestHoldShareSteadyStateAsksNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b")), idle)
	rs := replicas(t, 1, clk, opts, srv, "t2:")
	for _, k := range keys("early-", 20) {
		visit(t, rs[0].front, k)
	}
	asked := func() uint64 {
		s := rs[0].b.hold.Counts.Snapshot()
		return s.Found + s.None + s.LookupErrors
	}
	if asked() != 20 {
		t.Fatalf("%d lookups for 20 new keys just after start, want 20", asked())
	}
	clk.advance(idle + time.Second)
	before := asked()
	gets := cmdCalls(t, srv, "getrange")
	for _, k := range keys("late-", 200) {
		visit(t, rs[0].front, k)
	}
	if n := asked() - before; n != 0 {
		t.Errorf("%d lookups in steady state, want 0", n)
	}
	if n := cmdCalls(t, srv, "getrange") - gets; n != 0 {
		t.Errorf("the server answered %d GETs in steady state, want 0", n)
	}
}

// cmdCalls returns how many times the server ran cmd (INFO commandstats).
func cmdCalls(t *testing.T, srv *redistest.Server, cmd string) int {
	t.Helper()
	info := strings.Join(srv.Do("INFO", "commandstats"), "\n")
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

// An unreachable store never fails a request: killed mid-run, every
// request is answered, the failures are counted, and when it returns the
// writes go on.
func TestHoldShareStoreDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	rs := replicas(t, 1, clk, opts, srv, "t3:")
	for _, k := range keys("user-", 50) {
		visit(t, rs[0].front, k)
	}
	waitWritten(t, rs, 50)
	srv.Stop()
	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "d"))...)
	opts.Hold.Share = share.Options{Redis: srv.URL(), Prefix: "t3:", Timeout: shareTimeout}
	if _, err := rs[0].b.Update(opts); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, k := range keys("new-", 100) {
		code, _, _ := get(t, rs[0].front.Client(), rs[0].front.URL+"/", "X-User-ID", k)
		if code != http.StatusOK {
			failed++
		}
	}
	if failed != 0 {
		t.Errorf("%d of 100 requests failed with the store down", failed)
	}
	if n := metric(t, rs[0].reg, "ringlb_hold_share_errors_total"); n == 0 {
		t.Error("ringlb_hold_share_errors_total = 0 with the store down")
	}
	if n := metric(t, rs[0].reg, "ringlb_hold_share_lookups_total", "result=error"); n == 0 {
		t.Error("no lookup counted as error with the store down")
	}
	srv.Restart()
	w := rs[0].b.hold.Counts.Written.Load()
	testenv.Eventually(t, 20*time.Second, func() error {
		visit(t, rs[0].front, fmt.Sprint("after-", time.Now().UnixNano()))
		if rs[0].b.hold.Counts.Written.Load() == w {
			return fmt.Errorf("nothing written since the store returned")
		}
		return nil
	})
}

// A replica restarted after a scale-out honours the records the others
// wrote before it.
func TestHoldShareRestartedReplica(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	old := replicas(t, 1, clk, opts, srv, "t4:")
	where := map[string]string{}
	live := keys("user-", 200)
	for _, k := range live {
		where[k] = visit(t, old[0].front, k)
	}
	waitWritten(t, old, 200)
	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "e"))...)
	fresh := replicas(t, 1, clk, opts, srv, "t4:")
	moved, movers := 0, 0
	for _, k := range live {
		if fresh[0].b.Lookup(k).Owner != where[k] {
			movers++
		}
		if visit(t, fresh[0].front, k) != where[k] {
			moved++
		}
	}
	if movers == 0 || moved != 0 {
		t.Errorf("restarted replica: %d keys in use moved (the new ring moves %d), want 0", moved, movers)
	}
}

// A password and TLS (rediss://) connect.
func TestHoldSharePasswordAndTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, certstest.Options{}).Write(t, dir, "redis")
	for _, tc := range []struct {
		name string
		srv  redistest.Options
		pw   string
		tls  *tls.Config
		ok   bool
	}{
		{"password", redistest.Options{Password: "s3cret-pass"}, "s3cret-pass", nil, true},
		{"wrong password", redistest.Options{Password: "s3cret-pass"}, "nope", nil, false},
		{"tls", redistest.Options{CertFile: certFile, KeyFile: keyFile}, "", &tls.Config{RootCAs: ca.Pool()}, true},
		{"tls untrusted", redistest.Options{CertFile: certFile, KeyFile: keyFile}, "", &tls.Config{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.srv)
			opts := holdOptions(upstreamsOf(t, newBackend(t, "a")), time.Minute)
			opts.Hold.Share = share.Options{Redis: srv.URL(), Password: tc.pw, Prefix: "t5:", Timeout: shareTimeout, TLS: tc.tls}
			b, _, front := proxy(t, opts)
			visit(t, front, "user-1")
			testenv.Eventually(t, 20*time.Second, func() error {
				s := b.hold.Counts.Snapshot()
				switch {
				case tc.ok && s.Written == 0:
					return fmt.Errorf("nothing written yet (%d errors)", s.Errors)
				case !tc.ok && s.Errors == 0:
					return fmt.Errorf("no error yet")
				}
				return nil
			})
			if s := b.hold.Counts.Snapshot(); tc.ok && s.Errors != 0 {
				t.Errorf("%d errors", s.Errors)
			}
		})
	}
}

// Rule 14's "once per key" with a key's requests arriving together, as a
// page's parallel requests do just after a scale-out: one of them asks the
// store and the others wait for its answer, so all of them stay on the
// key's upstream and the store answers one GET per key.
func TestHoldShareConcurrentFirstRequests(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	old := replicas(t, 1, clk, opts, srv, "t6:")[0]
	live := keys("page-", 40)
	where := map[string]string{}
	for _, k := range live {
		where[k] = visit(t, old.front, k)
	}
	waitWritten(t, []replica{old}, uint64(len(live)))

	// A replica started after a scale-out: the keys that its ring gives to
	// e are the ones that move unless the store is asked.
	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "e"))...)
	nw := replicas(t, 1, clk, opts, srv, "t6:")[0]
	var movers []string
	for _, k := range live {
		if nw.b.Lookup(k).Owner == "e" {
			movers = append(movers, k)
		}
	}
	if len(movers) < 3 {
		t.Fatalf("the new ring moves %d of %d keys; want some", len(movers), len(live))
	}
	gets := cmdCalls(t, srv, "getrange")
	const parallel = 8
	type answer struct {
		key, upstream string
		code          int
	}
	answers := make(chan answer, len(movers)*parallel)
	for _, k := range movers {
		// The store holds back every command for a while, so that the
		// key's other requests arrive while its lookup is in flight.
		srv.Do("CLIENT", "PAUSE", "150", "ALL")
		start := make(chan struct{})
		done := make(chan struct{}, parallel)
		for range parallel {
			go func() {
				defer func() { done <- struct{}{} }()
				<-start
				req, _ := http.NewRequest(http.MethodGet, nw.front.URL+"/", nil)
				req.Header.Set("X-User-ID", k)
				res, err := nw.front.Client().Do(req)
				if err != nil {
					answers <- answer{key: k, code: -1}
					return
				}
				res.Body.Close()
				answers <- answer{k, res.Header.Get("X-Backend"), res.StatusCode}
			}()
		}
		close(start)
		for range parallel {
			<-done
		}
	}
	close(answers)
	wrong := 0
	for a := range answers {
		if a.code != http.StatusOK || a.upstream != where[a.key] {
			wrong++
			t.Logf("key %s: %d from %q, held on %s", a.key, a.code, a.upstream, where[a.key])
		}
	}
	if wrong != 0 {
		t.Errorf("%d of %d parallel first requests left their key's upstream, want 0", wrong, len(movers)*parallel)
	}
	if n := cmdCalls(t, srv, "getrange") - gets; n != len(movers) {
		t.Errorf("the store answered %d GETs for %d keys, want one per key", n, len(movers))
	}
	if s := nw.b.hold.Counts.Snapshot(); s.Found != uint64(len(movers)) {
		t.Errorf("lookups found = %d, want %d", s.Found, len(movers))
	}
}

// Rule 14 under on_return stay: sessions that began on one replica while
// their owner was ejected stay where they began when it returns, also
// when their next request reaches a replica that never saw them: the
// return opens the store lookup again. Under on_return home they go to
// their owner.
func TestHoldShareReturn(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, home := range []bool{false, true} {
		const idle = 10 * time.Minute
		bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
		clk := newFakeClock()
		opts := holdOptions(upstreamsOf(t, bes...), idle)
		if home {
			opts.Hold.OnReturn = hold.Home
		}
		prefix := fmt.Sprintf("ret%v:", home)
		rs := replicas(t, 2, clk, opts, srv, prefix)
		clk.advance(idle + time.Minute) // the start's window is long closed
		var ofA []string
		for _, k := range keys("s-", 300) {
			if rs[0].b.Lookup(k).Owner == "a" {
				ofA = append(ofA, k)
			}
		}
		for _, r := range rs {
			r.b.HealthReporter().SetHealthy("a", false, "test")
		}
		began := map[string]string{}
		for _, k := range ofA {
			began[k] = visit(t, rs[0].front, k) // sessions begin on replica 0
		}
		waitWritten(t, rs, uint64(len(ofA)))
		clk.advance(time.Minute)
		for _, r := range rs {
			r.b.HealthReporter().SetHealthy("a", true, "test")
		}
		stayed := 0
		for _, k := range ofA {
			got := visit(t, rs[1].front, k) // their next request reaches replica 1
			if got == began[k] {
				stayed++
			} else if got != "a" {
				t.Errorf("home %v: session %s began on %s, went to %s", home, k, began[k], got)
			}
		}
		switch {
		case len(ofA) == 0:
			t.Fatal("a owns no key: the test shows nothing")
		case !home && stayed != len(ofA):
			t.Errorf("on_return stay: %d of %d sessions stayed where they began, want all", stayed, len(ofA))
		case home && stayed != 0:
			t.Errorf("on_return home: %d of %d sessions stayed away from a, want none", stayed, len(ofA))
		}
		t.Logf("home %v: %d of %d sessions begun during a's ejection stayed on replica 1", home, stayed, len(ofA))
	}
}
