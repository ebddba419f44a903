package balancer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/ring"
)

// upstreamStateOf returns b's admin view of name, failing the test if
// there is none.
func upstreamStateOf(t testing.TB, b *Balancer, name string) state.Upstream {
	t.Helper()
	st, err := b.UpstreamState(name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func setState(t testing.TB, b *Balancer, name string, st state.Admin) {
	t.Helper()
	if _, err := b.SetState(name, st); err != nil {
		t.Fatal(err)
	}
}

// Drain (rule 12): keys held on the upstream (records of this process
// younger than idle, made under the current version) still go there; new
// keys of its skip it with reason draining, and no other key moves. Its
// held keys count down as they go idle, and then it is drained. Under
// on_return home, ready brings exactly its keys back, and the version
// never changes.
func TestDrainKeepsHeldKeys(t *testing.T) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	opts.Hold.OnReturn = hold.Home
	b, reg, front := holdProxy(t, clk, opts)
	version := b.Version()

	live := keys("user-", 200)
	onA := map[string]bool{}
	for _, k := range live {
		if visit(t, front, k) == "a" {
			onA[k] = true
		}
	}
	if len(onA) < 20 {
		t.Fatalf("only %d of %d keys on a", len(onA), len(live))
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Ready || st.HeldKeys != len(onA) || st.Drained {
		t.Fatalf("before drain: %+v, want ready with %d held keys", st, len(onA))
	}

	st, err := b.SetState("a", state.Drain)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != state.Drain || st.HeldKeys != len(onA) || st.Drained || !st.Available {
		t.Fatalf("SetState answered %+v, want drain, available, %d held keys, not drained", st, len(onA))
	}
	if b.Version() != version {
		t.Errorf("drain changed the version: %s → %s", version, b.Version())
	}
	if v := metric(t, reg, "ringlb_upstream_state", "upstream=a", "state=drain"); v != 1 {
		t.Errorf(`ringlb_upstream_state{upstream="a",state="drain"} = %v, want 1`, v)
	}
	if v := metric(t, reg, "ringlb_upstream_state", "upstream=a", "state=ready"); v != 0 {
		t.Errorf(`ringlb_upstream_state{upstream="a",state="ready"} = %v, want 0`, v)
	}
	if v := metric(t, reg, "ringlb_upstream_state", "upstream=b", "state=ready"); v != 1 {
		t.Errorf(`ringlb_upstream_state{upstream="b",state="ready"} = %v, want 1`, v)
	}
	if !status(t, b, "a").Available || status(t, b, "a").AdminState != "drain" {
		t.Errorf("status of a: %+v", status(t, b, "a"))
	}

	// Held keys stay; the others do not move.
	for _, k := range live {
		got := visit(t, front, k)
		switch {
		case onA[k] && got != "a":
			t.Errorf("held key %s left draining a for %s", k, got)
		case !onA[k] && got == "a":
			t.Errorf("key %s, not held on a, went to draining a", k)
		}
	}
	if lr := b.Lookup(live[0]); onA[live[0]] && lr.Held != "a" {
		t.Errorf("lookup of a key held on a: held %q", lr.Held)
	}
	// A new key owned by a skips it, with reason draining.
	newKey := ""
	for _, k := range keys("new-", 1000) {
		if b.Lookup(k).Owner == "a" {
			newKey = k
			break
		}
	}
	lr := b.Lookup(newKey)
	if lr.Chosen == "a" || lr.Chosen == "" || !hasSkip(lr, "a", ring.Draining) || lr.Held != "" {
		t.Errorf("lookup of a new key of a while draining: %+v", lr)
	}
	if got := visit(t, front, newKey); got == "a" || got != lr.Chosen {
		t.Errorf("new key %s of draining a served by %s, lookup says %s", newKey, got, lr.Chosen)
	}

	// The held keys go idle: a is drained; its keys go elsewhere.
	clk.advance(idle)
	if st := upstreamStateOf(t, b, "a"); st.HeldKeys != 0 || !st.Drained {
		t.Errorf("after idle: %+v, want 0 held keys, drained", st)
	}
	for k := range onA {
		if got := visit(t, front, k); got == "a" {
			t.Errorf("key %s, idle for idle, still went to draining a", k)
		}
	}

	// ready: exactly a's keys come back (the records made meanwhile carry
	// the current version, so they do not keep a key away).
	setState(t, b, "a", state.Ready)
	for _, k := range append(live, newKey) {
		if lr := b.Lookup(k); lr.Chosen != lr.Owner {
			t.Errorf("after ready, key %s goes to %s, its owner is %s", k, lr.Chosen, lr.Owner)
		}
		if got, o := visit(t, front, k), b.Lookup(k).Owner; got != o {
			t.Errorf("after ready, key %s served by %s, owner %s", k, got, o)
		}
	}
	if b.Version() != version {
		t.Errorf("the version changed: %s → %s", version, b.Version())
	}
}

// maint: every request skips the upstream, held or not, with reason
// maint; under on_return home, ready brings its keys back.
func TestMaintSkipsHeldKeys(t *testing.T) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	opts.Hold.OnReturn = hold.Home
	b, reg, front := holdProxy(t, clk, opts)
	var onA []string
	for _, k := range keys("user-", 100) {
		if visit(t, front, k) == "a" {
			onA = append(onA, k)
		}
	}
	setState(t, b, "a", state.Maint)
	if v := metric(t, reg, "ringlb_upstream_state", "upstream=a", "state=maint"); v != 1 {
		t.Errorf(`ringlb_upstream_state{upstream="a",state="maint"} = %v, want 1`, v)
	}
	for _, k := range onA {
		if got := visit(t, front, k); got == "a" {
			t.Errorf("key %s went to a in maint", k)
		}
		if lr := b.Lookup(k); !hasSkip(lr, "a", ring.Maint) || lr.Held == "a" {
			t.Errorf("lookup of %s: %+v, want a skipped for maint", k, lr)
		}
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Maint || st.Drained {
		t.Errorf("in maint: %+v (drained is for state drain only)", st)
	}
	setState(t, b, "a", state.Ready)
	for _, k := range onA {
		if got := visit(t, front, k); got != "a" {
			t.Errorf("after ready, key %s served by %s, want a", k, got)
		}
	}
}

// on_return stay (the default): when a drained or maint upstream is made
// ready, the sessions that began elsewhere while it was out (its keys
// first seen then) stay where they began until they go idle, and its
// keys not in use come back at once. Nothing else moves.
func TestReadyKeepsSessionsThatBeganElsewhere(t *testing.T) {
	for _, st := range []state.Admin{state.Drain, state.Maint} {
		t.Run(st.String(), func(t *testing.T) {
			const idle = 10 * time.Minute
			bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
			clk := newFakeClock()
			b, _, front := holdProxy(t, clk, holdOptions(upstreamsOf(t, bes...), idle))
			var began, coldOfA []string // a's keys: sessions begun while it was out; keys never seen
			for _, k := range keys("k-", 400) {
				if b.Lookup(k).Owner == "a" {
					if len(began) < 30 {
						began = append(began, k)
					} else {
						coldOfA = append(coldOfA, k)
					}
				}
			}
			setState(t, b, "a", st)
			where := map[string]string{}
			for _, k := range began {
				where[k] = visit(t, front, k)
				if where[k] == "a" {
					t.Fatalf("new key %s went to a in %s", k, st)
				}
			}
			clk.advance(time.Minute)
			setState(t, b, "a", state.Ready)
			for _, k := range began {
				if got := visit(t, front, k); got != where[k] {
					t.Errorf("session %s began on %s while a was in %s; after ready it went to %s", k, where[k], st, got)
				}
				if h := b.Lookup(k).Held; h != where[k] {
					t.Errorf("lookup of %s: held %q, want %s", k, h, where[k])
				}
			}
			for _, k := range coldOfA {
				if got := visit(t, front, k); got != "a" {
					t.Errorf("key %s of a, not in use, went to %s after ready", k, got)
				}
			}
			clk.advance(idle)
			for _, k := range began {
				if got := visit(t, front, k); got != "a" {
					t.Errorf("session %s, idle for idle, went to %s, not home to a", k, got)
				}
			}
		})
	}
}

// Another replica, which never saw a key, honours a valid hold cookie
// naming its draining upstream (whatever the cookie's version), and sends
// a key without one elsewhere. The state comes from the options
// (upstreams[].state) here.
func TestDrainHonoursHoldCookie(t *testing.T) {
	const idle = 10 * time.Minute
	secret := []byte(strings.Repeat("s", 32))
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	opts.Hold.Cookie.Name = "ringlb_hold"
	opts.Hold.Cookie.Secrets = [][]byte{secret}
	_, _, front1 := holdProxy(t, clk, opts)
	cookies := map[string]string{}
	for _, k := range keys("u", 100) {
		code, be, ck := send(t, front1, k, "")
		if code != 200 || ck == "" {
			t.Fatalf("key %s: %d, cookie %q", k, code, ck)
		}
		if be == "a" {
			cookies[k] = ck
		}
	}
	if len(cookies) < 10 {
		t.Fatalf("only %d keys on a", len(cookies))
	}
	drained := opts
	drained.Upstreams = upstreamsOf(t, bes...)
	drained.Upstreams[0].State = state.Drain
	b2, _, front2 := holdProxy(t, clk, drained)
	if st := upstreamStateOf(t, b2, "a"); st.State != state.Drain {
		t.Fatalf("configured drain: %+v", st)
	}
	for k, ck := range cookies {
		if _, be, _ := send(t, front2, k, ck); be != "a" {
			t.Errorf("key %s with a cookie naming draining a: served by %s", k, be)
		}
	}
	// A fresh replica again, so that no record of its own holds the keys.
	_, _, front3 := holdProxy(t, clk, drained)
	for k := range cookies {
		if _, be, _ := send(t, front3, k, ""); be == "a" {
			t.Errorf("key %s without a cookie went to draining a", k)
		}
	}
}

// Under on_unavailable fail: an unheld key of a draining owner, and any
// key of an owner in maint, gets 503 naming why; a held key of a draining
// owner is served there.
func TestStatesFailMode(t *testing.T) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	opts.Ring.OnUnavailable = options.OnUnavailableFail
	b, _, front := holdProxy(t, clk, opts)
	held := keyOwnedBy(t, b, "a")
	if visit(t, front, held) != "a" {
		t.Fatal("the key's owner did not serve it")
	}
	setState(t, b, "a", state.Drain)
	if got := visit(t, front, held); got != "a" {
		t.Errorf("held key of draining owner: served by %s", got)
	}
	var unheld string
	for _, k := range keys("new-", 1000) {
		if b.Lookup(k).Owner == "a" {
			unheld = k
			break
		}
	}
	code, be, body := get(t, front.Client(), front.URL+"/", "X-User-ID", unheld)
	if code != http.StatusServiceUnavailable || be != "" || body != "upstream a for this key is draining\n" {
		t.Errorf("unheld key of draining owner: %d from %q: %q", code, be, body)
	}
	setState(t, b, "a", state.Maint)
	for _, k := range []string{held, unheld} {
		code, _, body := get(t, front.Client(), front.URL+"/", "X-User-ID", k)
		if code != http.StatusServiceUnavailable || body != "upstream a for this key is in maint\n" {
			t.Errorf("key %s of an owner in maint: %d %q", k, code, body)
		}
	}
}

// Draining every upstream is allowed: new keys get 503 saying so, held
// keys are still served.
func TestEveryUpstreamDraining(t *testing.T) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b")}
	clk := newFakeClock()
	b, _, front := holdProxy(t, clk, holdOptions(upstreamsOf(t, bes...), idle))
	where := visit(t, front, "old")
	setState(t, b, "a", state.Drain)
	setState(t, b, "b", state.Drain)
	code, _, body := get(t, front.Client(), front.URL+"/", "X-User-ID", "brand-new")
	if code != http.StatusServiceUnavailable || body != "no upstream available: every upstream draining\n" {
		t.Errorf("new key with every upstream draining: %d %q", code, body)
	}
	if got := visit(t, front, "old"); got != where {
		t.Errorf("held key: served by %s, want %s", got, where)
	}
	if !b.Ready() {
		t.Error("Ready() false: draining is not unavailability")
	}
}

// Without hold no key is held: a draining upstream gets nothing new.
func TestDrainWithoutHold(t *testing.T) {
	r := newRig(t, 3, nil)
	ks := newKeyset(r.b, 300)
	setState(t, r.b, "a", state.Drain)
	r.serveAll(t, ks, "a")
	if n := r.bes["a"].hits.Load(); n != 0 {
		t.Errorf("draining a got %d requests without hold", n)
	}
	if st := upstreamStateOf(t, r.b, "a"); !st.Drained || st.HeldKeys != 0 {
		t.Errorf("%+v, want drained", st)
	}
	setState(t, r.b, "a", state.Ready)
	ks.checkPlacement(t, r.b)
}

// A state set through the API stays across reloads that leave the
// upstream's configured state alone; a reload that changes that field
// wins; a member removed and added again starts in its configured state.
func TestStateAcrossReloads(t *testing.T) {
	r := newRig(t, 3, nil)
	b, opts := r.b, r.opts
	setState(t, b, "a", state.Drain)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Drain {
		t.Fatalf("after a reload that leaves state alone: %v, want drain", st.State)
	}
	changed := opts
	changed.Upstreams = append([]options.Upstream(nil), opts.Upstreams...)
	changed.Upstreams[0].State = state.Maint
	if _, err := b.Update(changed); err != nil {
		t.Fatal(err)
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Maint {
		t.Fatalf("after a reload setting maint: %v", st.State)
	}
	setState(t, b, "a", state.Ready)
	if _, err := b.Update(changed); err != nil { // maint again, unchanged
		t.Fatal(err)
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Ready {
		t.Fatalf("the API's ready after a reload that kept state maint: %v", st.State)
	}
	// Removed, then added again: its configured state.
	if _, err := b.Update(Options{PoolOptions: PoolOptions{Upstreams: changed.Upstreams[1:], Ring: opts.Ring, Hash: opts.Hash, Timeouts: opts.Timeouts}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpstreamState("a"); !errors.Is(err, ErrUnknownUpstream) {
		t.Errorf("removed upstream: %v, want ErrUnknownUpstream", err)
	}
	if _, err := b.SetState("a", state.Drain); !errors.Is(err, ErrUnknownUpstream) {
		t.Errorf("SetState of a removed upstream: %v", err)
	}
	if _, err := b.Update(changed); err != nil {
		t.Fatal(err)
	}
	if st := upstreamStateOf(t, b, "a"); st.State != state.Maint {
		t.Errorf("re-added: %v, want its configured maint", st.State)
	}
	if r.logs.count("upstream state", "upstream=a", "by=api") != 2 || r.logs.count("upstream state", "upstream=a", "by=config") != 2 {
		t.Errorf("state log lines:\n%s", r.logs)
	}
}

// Requests in flight and open tunnels keep a draining upstream from
// being drained until they finish.
func TestDrainedWaitsForInflightAndTunnels(t *testing.T) {
	r := newRig(t, 1, nil)
	be := r.bes["a"]
	release := make(chan struct{})
	be.hold.Store(&release)
	arrived := make(chan string, 1)
	be.arrived.Store(&arrived)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := r.client.Get(r.front.URL + "/?user=slow")
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}()
	<-arrived
	be.arrived.Store(nil)
	setState(t, r.b, "a", state.Drain)
	if st := upstreamStateOf(t, r.b, "a"); st.Inflight != 1 || st.Drained {
		t.Errorf("with a request in flight: %+v", st)
	}
	close(release)
	<-done
	be.hold.Store(nil)
	testenv.Eventually(t, 10*time.Second, func() error {
		if st := upstreamStateOf(t, r.b, "a"); !st.Drained {
			return fmt.Errorf("a not drained once its request finished: %+v", st)
		}
		return nil
	})

	// A tunnel opened while ready stays open through drain.
	ws := newBackend(t, "ws")
	ws.handle = echoUpgrade
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, ws)))
	bws := front.Config.Handler.(*Balancer)
	conn := dialRaw(t, front, 10*time.Second)
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%v %v", res, err)
	}
	setState(t, bws, "ws", state.Drain)
	st := upstreamStateOf(t, bws, "ws")
	if st.Tunnels != 1 || st.Inflight != 1 || st.Drained {
		t.Errorf("with a tunnel open: %+v", st)
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("the tunnel stopped working after drain: %q %v", buf, err)
	}
	conn.Close()
	testenv.Eventually(t, 10*time.Second, func() error {
		if st := upstreamStateOf(t, bws, "ws"); !st.Drained {
			return fmt.Errorf("ws not drained once its tunnel closed: %+v", st)
		}
		return nil
	})
	if st := upstreamStateOf(t, bws, "ws"); st.Tunnels != 0 {
		t.Errorf("after the tunnel closed: %+v", st)
	}
}
