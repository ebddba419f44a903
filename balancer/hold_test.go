package balancer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
)

// holdProxy serves a Balancer over loopback whose clock c drives, with
// opts' hold turned on by a reload once c is installed (so that the
// expiry timer runs on c from its start).
func holdProxy(t testing.TB, c *fakeClock, opts Options) (*Balancer, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	off := opts
	off.Hold = hold.Options{}
	b, reg, front := proxy(t, off)
	c.install(b)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	return b, reg, front
}

// holdOptions is baseOptions keyed on X-User-ID, with hold on (idle) and
// bounded loads off, as a session-holding fleet runs.
func holdOptions(ups []options.Upstream, idle time.Duration) Options {
	opts := baseOptions(ups)
	opts.Ring.LoadFactor = 0
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = options.OnMissingReject
	opts.Hold = hold.Options{Idle: idle, MaxKeys: 100_000}
	return opts
}

// visit sends one request for key and returns the upstream that served it.
func visit(t testing.TB, front *httptest.Server, key string, hdr ...string) string {
	t.Helper()
	code, be, body := get(t, front.Client(), front.URL+"/", append([]string{"X-User-ID", key}, hdr...)...)
	if code != http.StatusOK {
		t.Fatalf("key %s: %d %s", key, code, body)
	}
	return be
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// Scale-out by reload: every key in use stays where it was (0 moved), new
// keys follow the new ring, a key kept in use stays for as long as it is
// used, and a key idle for idle follows the ring.
func TestHoldScaleOut(t *testing.T) {
	const idle = 10 * time.Minute
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	e := newBackend(t, "e")
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	b, reg, front := holdProxy(t, clk, opts)

	live := keys("user-", 300)
	where := map[string]string{}
	for _, k := range live {
		where[k] = visit(t, front, k)
	}
	if n := metric(t, reg, "ringlb_hold_keys"); n != 300 {
		t.Fatalf("ringlb_hold_keys = %v after 300 keys, want 300", n)
	}
	if n := metric(t, reg, "ringlb_held_total"); n != 0 {
		t.Fatalf("ringlb_held_total = %v before any change", n)
	}

	clk.advance(time.Minute)
	opts.Upstreams = upstreamsOf(t, append(bes, e)...)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	var moved []string // keys the new ring gives to e
	for _, k := range live {
		lk := b.Lookup(k)
		if lk.Owner != where[k] {
			if lk.Owner != "e" {
				t.Fatalf("key %s: owner %s after adding e, was %s", k, lk.Owner, where[k])
			}
			moved = append(moved, k)
			if lk.Held != where[k] {
				t.Errorf("key %s: lookup held %q, want %s", k, lk.Held, where[k])
			}
		} else if lk.Held != where[k] {
			// Held too (a record of the old ring), where the ring puts it.
			t.Errorf("key %s: lookup held %q, want %s", k, lk.Held, where[k])
		}
	}
	if len(moved) < 30 {
		t.Fatalf("the new ring moves %d of 300 keys; want about a fifth", len(moved))
	}
	for _, k := range live {
		if got := visit(t, front, k); got != where[k] {
			t.Errorf("key %s in use moved from %s to %s", k, where[k], got)
		}
	}
	if n := metric(t, reg, "ringlb_held_total"); n != float64(len(moved)) {
		t.Errorf("ringlb_held_total = %v, want %d (the moved keys, each once)", n, len(moved))
	}
	if e.hits.Load() != 0 {
		t.Errorf("e served %d requests of keys in use", e.hits.Load())
	}

	// New keys follow the new ring, e included.
	onE := 0
	for _, k := range keys("newcomer-", 200) {
		got := visit(t, front, k)
		if want := b.Lookup(k).Owner; got != want {
			t.Errorf("new key %s went to %s, the ring says %s", k, got, want)
		}
		if got == "e" {
			onE++
		}
	}
	if onE == 0 {
		t.Error("no new key reached e")
	}

	// Half of the moved keys stay in use, each visit within idle of the
	// one before, for five times idle; the others stay away.
	warm, cold := moved[:len(moved)/2], moved[len(moved)/2:]
	for range 50 {
		clk.advance(idle / 10)
		for _, k := range warm {
			if got := visit(t, front, k); got != where[k] {
				t.Fatalf("warm key %s moved to %s after %v", k, got, clk.Now().Sub(clk.base))
			}
		}
	}
	clk.fire() // the expiry timer: the idle records go
	if n, want := metric(t, reg, "ringlb_hold_keys"), float64(len(warm)); n != want {
		t.Errorf("ringlb_hold_keys = %v after the others went idle, want %v (the warm keys)", n, want)
	}
	for _, k := range cold {
		if lk := b.Lookup(k); lk.Held != "" {
			t.Errorf("idle key %s: lookup still held on %s", k, lk.Held)
		}
		if got := visit(t, front, k); got != "e" {
			t.Errorf("idle key %s went to %s, want e (the ring's)", k, got)
		}
	}
	for _, k := range warm {
		if got := visit(t, front, k); got != where[k] {
			t.Errorf("warm key %s moved to %s", k, got)
		}
	}
}

// Rule 2 with hold on and on_return home: ejecting an upstream moves
// exactly its keys, and readmitting it brings exactly those back, as
// without hold, request for request. An ejection is not a membership
// change.
func TestHoldLeavesEjectionAlone(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	clk := newFakeClock()
	on := holdOptions(upstreamsOf(t, bes...), time.Hour)
	on.Hold.OnReturn = hold.Home
	off := on
	off.Hold = hold.Options{}
	bOn, _, frontOn := holdProxy(t, clk, on)
	bOff, _, frontOff := proxy(t, off)
	ks := keys("k", 300)
	round := func(stage string) map[string]string {
		got := map[string]string{}
		for _, k := range ks {
			clk.advance(time.Second)
			got[k] = visit(t, frontOn, k)
			if w := visit(t, frontOff, k); w != got[k] {
				t.Errorf("%s: key %s went to %s with hold, %s without", stage, k, got[k], w)
			}
		}
		return got
	}
	before := round("before")
	for _, bb := range []*Balancer{bOn, bOff} {
		bb.HealthReporter().SetHealthy("c", false, "test")
	}
	during := round("c ejected")
	for _, bb := range []*Balancer{bOn, bOff} {
		bb.HealthReporter().SetHealthy("c", true, "test")
	}
	after := round("c readmitted")
	left := 0
	for _, k := range ks {
		if before[k] == "c" {
			left++
			if during[k] == "c" {
				t.Errorf("key %s stayed on the ejected c", k)
			}
		} else if during[k] != before[k] {
			t.Errorf("key %s moved from %s to %s though only c was ejected", k, before[k], during[k])
		}
		if after[k] != before[k] {
			t.Errorf("key %s: %s after c's return, %s before its ejection", k, after[k], before[k])
		}
	}
	if left == 0 {
		t.Fatal("c owned no key: the test shows nothing")
	}
	if h := bOn.Lookup(ks[0]).Held; h != "" {
		t.Errorf("lookup held %q with no membership change", h)
	}
}

// on_return stay (the default): ejecting an upstream moves exactly its
// keys; when it is readmitted, those of its keys in use on a neighbour
// stay there (their sessions began there) until they go idle, its keys
// not in use come back at once, and no other key moves. /debug/lookup's
// held names where a stayed key is held.
func TestHoldStaysThroughReturn(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	clk := newFakeClock()
	const idle = time.Hour
	on := holdOptions(upstreamsOf(t, bes...), idle)
	b, _, front := holdProxy(t, clk, on)
	ks := keys("k", 300)
	inUse, cold := ks[:200], ks[200:]
	round := func(ks []string) map[string]string {
		got := map[string]string{}
		for _, k := range ks {
			clk.advance(time.Millisecond)
			got[k] = visit(t, front, k)
		}
		return got
	}
	before := round(ks)
	b.HealthReporter().SetHealthy("c", false, "test")
	during := round(inUse) // the cold keys are not seen while c is out
	b.HealthReporter().SetHealthy("c", true, "test")
	after := round(inUse)
	stayed, onC := 0, 0
	for _, k := range inUse {
		switch {
		case before[k] == "c":
			onC++
			if during[k] == "c" {
				t.Errorf("key %s stayed on the ejected c", k)
			}
			if after[k] != during[k] {
				t.Errorf("key %s in use on %s while c was out went to %s after c's return, want it to stay", k, during[k], after[k])
			} else {
				stayed++
			}
			if h := b.Lookup(k).Held; h != during[k] {
				t.Errorf("key %s: lookup held %q, want %s", k, h, during[k])
			}
		case during[k] != before[k] || after[k] != before[k]:
			t.Errorf("key %s of %s moved (%s, then %s) though only c was ejected", k, before[k], during[k], after[k])
		}
	}
	if onC == 0 {
		t.Fatal("c owned no key in use: the test shows nothing")
	}
	// Keys not in use while c was out go home at once.
	for k, got := range round(cold) {
		if got != before[k] {
			t.Errorf("cold key %s went to %s, its owner is %s", k, got, before[k])
		}
	}
	// Once idle, the stayed keys go home too.
	clk.advance(idle + time.Minute)
	clk.fire()
	for k, got := range round(inUse) {
		if got != before[k] {
			t.Errorf("after idle, key %s went to %s, its owner is %s", k, got, before[k])
		}
	}
	t.Logf("%d of c's %d keys in use stayed where they were during its ejection", stayed, onC)
}

// A held upstream that becomes unavailable lets its held keys go by the
// ring (remap), or answers 503 naming it (on_unavailable fail, where it
// is the key's owner). Removing it drops its records.
func TestHoldHeldUpstreamUnavailable(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("fail=", fail), func(t *testing.T) {
			bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
			e := newBackend(t, "e")
			clk := newFakeClock()
			opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
			if fail {
				opts.Ring.OnUnavailable = options.OnUnavailableFail
			}
			b, _, front := holdProxy(t, clk, opts)
			where := map[string]string{}
			for _, k := range keys("u", 200) {
				where[k] = visit(t, front, k)
			}
			opts.Upstreams = upstreamsOf(t, append(bes, e)...)
			if _, err := b.Update(opts); err != nil {
				t.Fatal(err)
			}
			// A key held on c that the new ring gives to e.
			key := ""
			for k, w := range where {
				if w == "c" && b.Lookup(k).Owner == "e" {
					key = k
					break
				}
			}
			if key == "" {
				t.Fatal("no key of c moves to e")
			}
			if got := visit(t, front, key); got != "c" {
				t.Fatalf("held key went to %s, want c", got)
			}
			b.HealthReporter().SetHealthy("c", false, "test")
			code, be, body := get(t, front.Client(), front.URL+"/", "X-User-ID", key)
			switch {
			case fail && (code != 503 || body != "upstream c for this key is unavailable\n"):
				t.Errorf("held upstream down, fail mode: %d %q, want 503 naming c", code, body)
			case !fail && (code != 200 || be != "e"):
				t.Errorf("held upstream down: %d from %s, want 200 from e (the ring's)", code, be)
			}
			b.HealthReporter().SetHealthy("c", true, "test")
			if !fail {
				// The key was served on e under the current ring: it stays.
				if got := visit(t, front, key); got != "e" {
					t.Errorf("after c's return the key went to %s, want e (recorded there)", got)
				}
				return
			}
			if got := visit(t, front, key); got != "c" {
				t.Errorf("after c's return the key went to %s, want c (still held)", got)
			}
			// Removing c drops its records: the key follows the ring.
			opts.Upstreams = upstreamsOf(t, bes[0], bes[1], e)
			if _, err := b.Update(opts); err != nil {
				t.Fatal(err)
			}
			if got := visit(t, front, key); got != "e" {
				t.Errorf("after removing c the key went to %s, want e", got)
			}
		})
	}
}

// holdCookie returns the value of the hold cookie a response set, or "".
func holdCookieOf(t testing.TB, res *http.Response, name string) string {
	t.Helper()
	n := 0
	v := ""
	for _, c := range res.Cookies() {
		if c.Name == name {
			n++
			v = c.Value
			if c.Path != "/" || c.SameSite != http.SameSiteLaxMode || c.MaxAge <= 0 {
				t.Errorf("hold cookie attributes %+v", c)
			}
		}
	}
	if n > 1 {
		t.Errorf("%d hold cookies set on one response", n)
	}
	return v
}

// send sends one request for key with the given cookie value (if any) and
// returns the status, the upstream and the hold cookie set, if any.
func send(t testing.TB, front *httptest.Server, key, cookie string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
	req.Header.Set("X-User-ID", key)
	if cookie != "" {
		req.Header.Set("Cookie", "other=1; ringlb_hold="+cookie)
	}
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode, res.Header.Get("X-Backend"), holdCookieOf(t, res, "ringlb_hold")
}

// Two replicas sharing a secret: one that never saw a key honours the
// cookie the other set. Tampered, expired, foreign and other-key cookies
// are ignored with a 200. Steady traffic does not get a cookie on every
// response.
func TestHoldCookieReplicas(t *testing.T) {
	const idle = 10 * time.Minute
	secret := []byte(strings.Repeat("s", 32))
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	e := newBackend(t, "e")
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	opts.Hold.Cookie.Name = "ringlb_hold"
	opts.Hold.Cookie.Secrets = [][]byte{secret}
	opts.Hash.Cookie = options.Cookie{Name: "ringlb_affinity", HTTPOnly: true}
	r1, _, front1 := holdProxy(t, clk, opts)

	// Replica 1 serves keys before the scale-out and sets their cookies.
	cookies, where := map[string]string{}, map[string]string{}
	for _, k := range keys("u", 100) {
		code, be, ck := send(t, front1, k, "")
		if code != 200 || ck == "" {
			t.Fatalf("key %s: %d, cookie %q", k, code, ck)
		}
		cookies[k], where[k] = ck, be
	}
	// A fresh cookie is not set again...
	if _, _, ck := send(t, front1, "u0", cookies["u0"]); ck != "" {
		t.Errorf("a fresh cookie was set again: %q", ck)
	}
	// ...until half of idle has passed.
	clk.advance(idle/2 + time.Second)
	if _, _, ck := send(t, front1, "u0", cookies["u0"]); ck == "" {
		t.Error("the cookie was not renewed after half of idle")
	} else {
		cookies["u0"] = ck
	}

	// Replica 2 starts after the scale-out: it never saw a key.
	scaled := opts
	scaled.Upstreams = upstreamsOf(t, append(bes, e)...)
	r2, reg2, front2 := holdProxy(t, clk, scaled)
	if _, err := r1.Update(scaled); err != nil {
		t.Fatal(err)
	}
	var moved []string
	for k := range where {
		if r2.Lookup(k).Owner == "e" {
			moved = append(moved, k)
		}
	}
	if len(moved) < 8 {
		t.Fatalf("only %d keys move to e", len(moved))
	}
	for _, k := range moved {
		if _, be, _ := send(t, front2, k, cookies[k]); be != where[k] {
			t.Errorf("replica 2, key %s with replica 1's cookie: served by %s, want %s", k, be, where[k])
		}
	}
	if n := metric(t, reg2, "ringlb_held_total"); n != float64(len(moved)) {
		t.Errorf("replica 2 ringlb_held_total = %v, want %d", n, len(moved))
	}

	// Bad cookies are ignored: the key goes by the ring, with a 200.
	k, k2 := moved[0], moved[1]
	good := cookies[k]
	foreign, _ := hold.NewCodec([][]byte{[]byte(strings.Repeat("x", 32))})
	tamper := func(s string) string {
		b := []byte(s)
		b[len(b)/2] ^= 1
		if b[len(b)/2] == '-' || b[len(b)/2] == '_' || !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", rune(b[len(b)/2])) {
			b[len(b)/2] = 'A'
		}
		return string(b)
	}
	for name, v := range map[string]string{
		"tampered":       tamper(good),
		"foreign secret": foreign.Encode(hold.NewCookie(r2.snap.Load().ring.Hash(k), where[k], hold.VersionOf("x"), clk.Now(), idle)),
		"other key":      cookies[k2],
		"garbage":        "not-a-cookie",
	} {
		if v == good {
			t.Fatalf("%s: cookie unchanged", name)
		}
		// Replica 2 has no record of k (it served it only with the
		// cookie, and recorded it there): use a fresh replica each time.
		r3, _, front3 := holdProxy(t, clk, scaled)
		_ = r3
		if code, be, _ := send(t, front3, k, v); code != 200 || be != "e" {
			t.Errorf("%s cookie: %d from %s, want 200 from e (the ring's)", name, code, be)
		}
	}
	// Expired: idle has passed since replica 1 last set it.
	clk.advance(idle)
	_, _, front4 := holdProxy(t, clk, scaled)
	if code, be, _ := send(t, front4, k, good); code != 200 || be != "e" {
		t.Errorf("expired cookie: %d from %s, want 200 from e", code, be)
	}
	_ = reg2
}

// Rotation: a replica that verifies both secrets honours the old one's
// cookies; one that knows only the old secret ignores the new one's
// until it is given the new secret too.
func TestHoldCookieRotation(t *testing.T) {
	const idle = time.Hour
	oldSecret := []byte(strings.Repeat("o", 32))
	newSecret := []byte(strings.Repeat("n", 40))
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	e := newBackend(t, "e")
	clk := newFakeClock()
	before := holdOptions(upstreamsOf(t, bes...), idle)
	before.Hold.Cookie.Name = "ringlb_hold"
	after := before
	after.Upstreams = upstreamsOf(t, append(bes, e)...)
	with := func(o Options, secrets ...[]byte) Options {
		o.Hold.Cookie.Secrets = secrets
		return o
	}
	// Cookies from a replica signing with the old secret, before the
	// scale-out, and from one signing with the new, before it too.
	_, _, oldSigner := holdProxy(t, clk, with(before, oldSecret))
	_, _, newSigner := holdProxy(t, clk, with(before, newSecret, oldSecret))
	b0, _, _ := proxy(t, with(after, oldSecret))
	var key string
	for _, k := range keys("r", 200) {
		if b0.Lookup(k).Owner == "e" {
			key = k
			break
		}
	}
	_, whereOld, ckOld := send(t, oldSigner, key, "")
	_, whereNew, ckNew := send(t, newSigner, key, "")
	if whereOld != whereNew || whereOld == "e" {
		t.Fatalf("key %s on %s and %s before e joined", key, whereOld, whereNew)
	}
	for _, tc := range []struct {
		name    string
		secrets [][]byte
		cookie  string
		held    bool
	}{
		{"old only, old cookie", [][]byte{oldSecret}, ckOld, true},
		{"old only, new cookie", [][]byte{oldSecret}, ckNew, false},
		{"old then new, new cookie", [][]byte{oldSecret, newSecret}, ckNew, true},
		{"new then old, old cookie", [][]byte{newSecret, oldSecret}, ckOld, true},
		{"new only, old cookie", [][]byte{newSecret}, ckOld, false},
	} {
		_, _, front := holdProxy(t, clk, with(after, tc.secrets...))
		want := "e"
		if tc.held {
			want = whereOld
		}
		if code, be, _ := send(t, front, key, tc.cookie); code != 200 || be != want {
			t.Errorf("%s: %d from %s, want 200 from %s", tc.name, code, be, want)
		}
	}
}

// A flood of new keys never holds more than max_keys records; a reload
// that changes max_keys carries the records over (the most recent ones
// when it shrinks).
func TestHoldMaxKeysFlood(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
	opts.Hold.MaxKeys = 200
	b, reg, front := holdProxy(t, clk, opts)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= 5000; i = next.Add(1) {
				clk.advance(time.Millisecond) // each key used later than the one before
				visit(t, front, fmt.Sprint("flood-", i))
			}
		}()
	}
	wg.Wait()
	if n := metric(t, reg, "ringlb_hold_keys"); n > 200 || n < 150 {
		t.Fatalf("ringlb_hold_keys = %v after 5000 keys, max_keys 200", n)
	}
	// The most recent keys are still there: a reload adds an upstream and
	// the last keys of the flood stay, through a change of max_keys.
	opts.Hold.MaxKeys = 100
	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "c"))...)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, reg, "ringlb_hold_keys"); n != 100 {
		t.Fatalf("ringlb_hold_keys = %v after max_keys went to 100", n)
	}
	if got := b.hold.Store().MaxKeys(); got != 100 {
		t.Fatalf("store MaxKeys %d", got)
	}
	// Eviction takes the least recent of a sample: the last keys of the
	// flood survive both the flood and the shrink.
	held := 0
	for i := 4981; i <= 5000; i++ {
		if b.Lookup(fmt.Sprint("flood-", i)).Held != "" {
			held++
		}
	}
	if held < 18 {
		t.Errorf("%d of the last 20 keys of the flood are held after the reload, want nearly all", held)
	}
}

// With on_missing random a keyless request is not recorded (its position
// is random, so a record would hold nothing); with on_missing cookie the
// generated affinity id is a key like any other: held through a scale-out.
func TestHoldOnMissing(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
	opts.Hash.OnMissing = options.OnMissingRandom
	_, reg, front := holdProxy(t, clk, opts)
	for range 50 {
		if code, _, _ := get(t, front.Client(), front.URL+"/"); code != 200 {
			t.Fatal(code)
		}
	}
	if n := metric(t, reg, "ringlb_hold_keys"); n != 0 {
		t.Errorf("on_missing random: %v records of keyless requests", n)
	}

	opts.Hash.OnMissing = options.OnMissingCookie
	opts.Hash.Cookie = options.Cookie{Name: "ringlb_affinity", TTL: time.Hour, HTTPOnly: true}
	b, _, front := holdProxy(t, clk, opts)
	type user struct{ cookie, where string }
	var users []user
	for range 100 {
		res, err := front.Client().Get(front.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var id string
		for _, c := range res.Cookies() {
			if c.Name == "ringlb_affinity" {
				id = c.Value
			}
		}
		users = append(users, user{"ringlb_affinity=" + id, res.Header.Get("X-Backend")})
	}
	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "e"))...)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, u := range users {
		id := strings.TrimPrefix(u.cookie, "ringlb_affinity=")
		if b.Lookup(id).Owner != u.where {
			moved++
		}
		if _, got, _ := get(t, front.Client(), front.URL+"/", "Cookie", u.cookie); got != u.where {
			t.Errorf("affinity id %s moved from %s to %s", id, u.where, got)
		}
	}
	if moved == 0 {
		t.Fatal("the new ring moves no affinity id")
	}
}

// Concurrent requests, reloads that add and remove an upstream, and
// expiries, under -race: every request is answered, and the store stays
// within max_keys.
func TestHoldConcurrent(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	e := newBackend(t, "e")
	opts := holdOptions(upstreamsOf(t, bes...), 20*time.Millisecond)
	opts.Hold.MaxKeys = 300
	opts.Hold.Cookie.Name = "ringlb_hold"
	opts.Hold.Cookie.Secrets = [][]byte{[]byte(strings.Repeat("k", 32))}
	opts.Ring.LoadFactor = 1.25
	b, reg, front := proxy(t, opts)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // reloads
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o := opts
			if i%2 == 0 {
				o.Upstreams = upstreamsOf(t, append(bes, e)...)
			}
			o.Hold.MaxKeys = 300 + i%2*100
			if _, err := b.Update(o); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // expiries, as the timer runs them
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st := b.hold.Store(); st != nil {
				st.Expire(b.nanotime(), 64)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var clients sync.WaitGroup
	for w := range 8 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			cookies := map[string]string{}
			for i := range 300 {
				k := fmt.Sprint("c", (i*7+w)%500)
				code, _, ck := send(t, front, k, cookies[k])
				if code != 200 {
					t.Errorf("key %s: %d", k, code)
					return
				}
				if ck != "" {
					cookies[k] = ck
				}
				if n := b.hold.Store().Len(); n > 400 {
					t.Errorf("store holds %d records, max_keys at most 400", n)
					return
				}
				b.Lookup(k)
			}
		}()
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	if metric(t, reg, "ringlb_hold_keys") < 0 {
		t.Error("no ringlb_hold_keys")
	}
}

// Hold off: no records, no timer, ringlb_hold_keys 0; turning it off by a
// reload frees the store and stops the timer.
func TestHoldOff(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
	b, reg, front := holdProxy(t, clk, opts)
	visit(t, front, "k")
	if n := metric(t, reg, "ringlb_hold_keys"); n != 1 {
		t.Fatalf("ringlb_hold_keys = %v", n)
	}
	if clk.pending() != 1 {
		t.Fatalf("%d timers pending with hold on, want the expiry timer", clk.pending())
	}
	opts.Hold = hold.Options{}
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	visit(t, front, "k")
	if n := metric(t, reg, "ringlb_hold_keys"); n != 0 {
		t.Errorf("ringlb_hold_keys = %v with hold off", n)
	}
	if clk.pending() != 0 || b.hold.Store() != nil {
		t.Errorf("hold off: %d timers pending, store %v", clk.pending(), b.hold.Store())
	}
	if h := b.Lookup("k").Held; h != "" {
		t.Errorf("hold off: lookup held %q", h)
	}
	// Close stops the expiry timer.
	opts.Hold = hold.Options{Idle: time.Hour}
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if clk.pending() != 1 {
		t.Fatalf("hold on again: %d timers pending", clk.pending())
	}
	b.Close()
	if clk.pending() != 0 {
		t.Errorf("%d timers pending after Close", clk.pending())
	}
}

// The hold cookie goes on the final response head only, also after a 103
// Early Hints, and names the upstream that served: here the one a retry
// reached after the key's owner failed behind its 1xx. A request that
// nothing served (503) sets none.
func TestHoldCookieSurvives1xxAndRetry(t *testing.T) {
	secret := []byte(strings.Repeat("h", 32))
	hints := func(w http.ResponseWriter) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		panic(http.ErrAbortHandler) // a fails after its 1xx
	}
	bb.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		io.WriteString(w, "b")
	}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, a, bb), time.Hour)
	opts.Hold.Cookie.Name = "ringlb_hold"
	opts.Hold.Cookie.Secrets = [][]byte{secret}
	b, _, front := holdProxy(t, clk, opts)
	codec, _ := hold.NewCodec([][]byte{secret})
	key := ""
	for _, k := range keys("k", 100) {
		if b.Lookup(k).Owner == "a" {
			key = k
			break
		}
	}
	var early []string // Set-Cookie values seen on 1xx heads
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			early = append(early, h.Values("Set-Cookie")...)
			return nil
		},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/", nil)
	req.Header.Set("X-User-ID", key)
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Backend") != "b" {
		t.Fatalf("%d from %q, want 200 from b (a's failure retried)", res.StatusCode, res.Header.Get("X-Backend"))
	}
	if len(early) != 0 {
		t.Errorf("Set-Cookie on a 1xx head: %q", early)
	}
	v := holdCookieOf(t, res, "ringlb_hold")
	ck, ok := codec.Decode(v, b.snap.Load().ring.Hash(key), clk.Now())
	if !ok || ck.Upstream != "b" {
		t.Errorf("hold cookie %q decodes to %+v, %v; want one naming b", v, ck, ok)
	}

	for _, u := range []string{"a", "b"} {
		b.HealthReporter().SetHealthy(u, false, "test")
	}
	req, _ = http.NewRequest(http.MethodGet, front.URL+"/", nil)
	req.Header.Set("X-User-ID", key)
	if res, err = front.Client().Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || holdCookieOf(t, res, "ringlb_hold") != "" {
		t.Errorf("nothing available: %d with hold cookie %q, want 503 and none", res.StatusCode, holdCookieOf(t, res, "ringlb_hold"))
	}
}

// A weight change is a membership change too: the keys it gives to the
// heavier upstream stay where they are while in use; new keys follow.
func TestHoldWeightChange(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
	b, _, front := holdProxy(t, clk, opts)
	where := map[string]string{}
	for _, k := range keys("w", 200) {
		where[k] = visit(t, front, k)
	}
	opts.Upstreams[0].Weight = 2
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k, w := range where {
		if b.Lookup(k).Owner != w {
			moved++
		}
		if got := visit(t, front, k); got != w {
			t.Errorf("key %s in use moved from %s to %s on a weight change", k, w, got)
		}
	}
	if moved < 10 {
		t.Fatalf("doubling a's weight moves %d of 200 keys", moved)
	}
	for _, k := range keys("fresh", 100) {
		if got, want := visit(t, front, k), b.Lookup(k).Owner; got != want {
			t.Errorf("new key %s went to %s, the ring says %s", k, got, want)
		}
	}
}

// Hold works whatever the key's source: for each, keys in use stay
// through a scale-out.
func TestHoldEveryKeySource(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	e := newBackend(t, "e")
	cases := []struct {
		src key.Source
		req func(front, key string) (string, []string)
	}{
		{key.Source{Kind: key.Cookie, Name: "session"}, func(f, k string) (string, []string) { return f + "/x", []string{"Cookie", "session=" + k} }},
		{key.Source{Kind: key.Header, Name: "X-User-ID"}, func(f, k string) (string, []string) { return f + "/x", []string{"X-User-ID", k} }},
		{key.Source{Kind: key.Query, Name: "user"}, func(f, k string) (string, []string) { return f + "/x?user=" + k, nil }},
		{key.Source{Kind: key.URI}, func(f, k string) (string, []string) { return f + "/p/" + k + "?q=1", nil }},
		{key.Source{Kind: key.Path}, func(f, k string) (string, []string) { return f + "/p/" + k, nil }},
		{key.Source{Kind: key.IP}, func(f, k string) (string, []string) { return f + "/x", []string{"X-Forwarded-For", "10.1.0." + k} }},
	}
	for _, tc := range cases {
		t.Run(string(tc.src.Kind), func(t *testing.T) {
			clk := newFakeClock()
			opts := holdOptions(upstreamsOf(t, bes...), time.Hour)
			opts.Hash.Key = []key.Source{tc.src}
			opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			b, reg, front := holdProxy(t, clk, opts)
			where := map[string]string{}
			for i := range 100 {
				target, hdr := tc.req(front.URL, fmt.Sprint(i+1))
				_, where[target+fmt.Sprint(hdr)], _ = get(t, front.Client(), target, hdr...)
			}
			opts.Upstreams = upstreamsOf(t, append(bes, e)...)
			if _, err := b.Update(opts); err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				target, hdr := tc.req(front.URL, fmt.Sprint(i+1))
				if _, got, _ := get(t, front.Client(), target, hdr...); got != where[target+fmt.Sprint(hdr)] {
					t.Errorf("key %d moved from %s to %s", i+1, where[target+fmt.Sprint(hdr)], got)
				}
			}
			if n := metric(t, reg, "ringlb_held_total"); n < 5 {
				t.Errorf("ringlb_held_total = %v: the scale-out moved (almost) none of 100 keys", n)
			}
		})
	}
}
