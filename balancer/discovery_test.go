package balancer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/dnstest"
	"github.com/ringlb/ringlb/ring"
)

// A discovery rig: a balancer whose members come from a test DNS server,
// served over loopback. Polls are made by the test (the interval is an
// hour), so each step of a test sees exactly one answer.
type discRig struct {
	z      *dnstest.Server
	b      *Balancer
	reg    *prometheus.Registry
	front  *httptest.Server
	logs   *logBuffer
	client *http.Client
}

const srvName = "_http._tcp.app.test"

func discOptions(z *dnstest.Server, static []options.Upstream, sources ...discovery.Source) Options {
	opts := baseOptions(static)
	opts.Hash.OnMissing = options.OnMissingReject
	opts.Ring.LoadFactor = 0 // placement alone decides, however many requests run at once
	opts.Discovery = &discovery.Options{
		Resolver: z.Addr, Interval: time.Hour, Timeout: 300 * time.Millisecond,
		RemoveAfter: time.Hour, Confirm: 3, Sources: sources,
	}
	return opts
}

func srvSource(name string) discovery.Source {
	return discovery.Source{SRV: name, Scheme: "http", Protocol: "http1", Weight: 1}
}

func newDiscRig(t *testing.T, z *dnstest.Server, opts Options) *discRig {
	t.Helper()
	r := &discRig{z: z, reg: metrics.NewRegistry(), logs: &logBuffer{}, client: &http.Client{Timeout: 5 * time.Second}}
	b, err := New(opts, r.reg, slog.New(slog.NewTextHandler(r.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.b = b
	t.Cleanup(b.Close)
	r.front = httptest.NewServer(b)
	t.Cleanup(r.front.Close)
	return r
}

// poll resolves every source once, now, and reports whether the
// membership changed.
func (r *discRig) poll(t *testing.T) bool {
	t.Helper()
	d := r.b.disc.run.Discoverer()
	if d == nil {
		t.Fatal("no discovery running")
	}
	return d.Poll(context.Background())
}

// placement returns where each key goes now, by Lookup (the request's pick).
func placement(b *Balancer, keys []string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = b.Lookup(k).Chosen
	}
	return out
}

// moves counts the keys whose placement differs, and the destinations.
func moves(before, after map[string]string) (int, map[string]int) {
	n, to := 0, map[string]int{}
	for k, o := range before {
		if after[k] != o {
			n++
			to[after[k]]++
		}
	}
	return n, to
}

// serveKeys GETs up to 400 of the keys (in a fixed order) through the
// proxy, 8 at a time, and returns how many requests failed (not a 200, or
// answered by another backend than want says).
func (r *discRig) serveKeys(t *testing.T, want map[string]string) int {
	t.Helper()
	var bad atomic.Int64
	var wg sync.WaitGroup
	keys := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				res, err := r.client.Get(r.front.URL + "/?user=" + k)
				if err != nil {
					t.Errorf("GET %s: %v", k, err)
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if got := res.Header.Get("X-Backend"); res.StatusCode != 200 || got != want[k] {
					if bad.Add(1) <= 3 {
						t.Errorf("key %s: %d from %q, want 200 from %s", k, res.StatusCode, got, want[k])
					}
				}
			}
		})
	}
	all := slices.Sorted(maps.Keys(want))
	for _, k := range all[:min(len(all), 400)] {
		keys <- k
	}
	close(keys)
	wg.Wait()
	return int(bad.Load())
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return keys
}

// hooks holds, by *backend of appBackend, a function its handler calls
// first.
var hooks sync.Map

// appBackend is a backend listening on ip:port (port 0: any), named by
// the member name it will have: target:port.
func appBackend(t *testing.T, target, ip string, port int) (*backend, int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	be := &backend{name: fmt.Sprintf("%s:%d", target, p)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		if h, ok := hooks.Load(be); ok {
			h.(func())()
		}
		w.Header().Set("X-Backend", be.name)
		w.Header().Set("X-Addr", r.Context().Value(http.LocalAddrContextKey).(net.Addr).String())
		io.WriteString(w, be.name)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	be.srv = srv
	t.Cleanup(srv.Close)
	return be, p
}

// fleet is n SRV targets app-I.test, each a backend on 127.0.0.1.
type fleet struct {
	z       *dnstest.Server
	bes     []*backend
	targets []string // "app-I.test.:PORT", as the SRV answer has them
	live    []bool
}

func newFleet(t *testing.T, z *dnstest.Server, n int) *fleet {
	f := &fleet{z: z}
	for range n {
		f.add(t)
	}
	return f
}

// add starts one more backend and returns its member name; the zone
// changes at the next publish.
func (f *fleet) add(t *testing.T) string {
	i := len(f.bes)
	host := fmt.Sprintf("app-%d.test", i)
	be, port := appBackend(t, host, "127.0.0.1", 0)
	f.bes = append(f.bes, be)
	f.targets = append(f.targets, fmt.Sprintf("%s.:%d", host, port))
	f.live = append(f.live, true)
	f.z.SetAddrs(host, "127.0.0.1")
	return be.name
}

// publish writes the SRV record of the live targets.
func (f *fleet) publish() {
	var ts []string
	for i, t := range f.targets {
		if f.live[i] {
			ts = append(ts, t)
		}
	}
	f.z.SetSRV(srvName, ts...)
}

func (f *fleet) names(live bool) []string {
	var out []string
	for i, be := range f.bes {
		if !live || f.live[i] {
			out = append(out, be.name)
		}
	}
	slices.Sort(out)
	return out
}

func memberNames(b *Balancer) []string {
	var out []string
	for _, m := range b.Members() {
		out = append(out, m.Name)
	}
	return out
}

// TestDiscoverySRV follows one SRV fleet through its life: the first
// answer, a scale-out, a restart at a new address, a short answer, DNS
// failures, and a scale-in through absence to removal.
func TestDiscoverySRV(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 4)
	f.publish()
	opts := discOptions(z, nil, srvSource(srvName))
	opts.Discovery.RemoveAfter = 300 * time.Millisecond
	r := newDiscRig(t, z, opts)
	b := r.b
	keys := testKeys(2000)

	// First answer: members named target:port, lowercased, no final dot.
	r.poll(t)
	if got, want := memberNames(b), f.names(false); !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	for _, u := range b.Status().Upstreams {
		if u.Source != srvName || u.Absent || !u.Available || u.URL != "http://"+strings.TrimPrefix(u.URL, "http://") {
			t.Errorf("member %+v", u)
		}
	}
	v4 := b.Version()
	p4 := placement(b, keys)
	if bad := r.serveKeys(t, p4); bad > 0 {
		t.Fatalf("%d requests failed after the first answer", bad)
	}
	if !b.Ready() {
		t.Fatal("not ready with 4 members")
	}

	// An unchanged answer builds nothing and logs nothing.
	snap := b.snap.Load()
	logged := len(r.logs.String())
	if r.poll(t) || b.snap.Load() != snap {
		t.Fatal("an unchanged answer installed a snapshot")
	}
	if l := r.logs.String()[logged:]; l != "" {
		t.Errorf("an unchanged answer logged:\n%s", l)
	}

	// Scale-out: keys move only to the newcomer, about 1/5 of them.
	newcomer := f.add(t)
	f.publish()
	if !r.poll(t) {
		t.Fatal("scale-out: no change")
	}
	v5 := b.Version()
	if v5 == v4 {
		t.Fatal("scale-out kept the version")
	}
	p5 := placement(b, keys)
	n, to := moves(p4, p5)
	if len(to) != 1 || to[newcomer] != n {
		t.Errorf("scale-out moved keys to %v, want only to %s", to, newcomer)
	}
	if frac := float64(n) / float64(len(keys)); frac < 0.12 || frac > 0.28 {
		t.Errorf("scale-out moved %.3f of the keys, want about 1/5", frac)
	}
	if bad := r.serveKeys(t, p5); bad > 0 {
		t.Fatalf("%d requests failed after the scale-out", bad)
	}

	// app-1 restarts on 127.0.0.2, same port: its URL changes, its name,
	// its keys and the version do not.
	moved := f.bes[1]
	_, port, _ := net.SplitHostPort(moved.srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	moved.srv.Close()
	again, _ := appBackend(t, "app-1.test", "127.0.0.2", p)
	f.bes[1] = again
	z.SetAddrs("app-1.test", "127.0.0.2")
	logged = len(r.logs.String())
	if !r.poll(t) {
		t.Fatal("readdress: no change")
	}
	if lines := strings.Split(strings.TrimSpace(r.logs.String()[logged:]), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "change=readdressed") || !strings.Contains(lines[0], "old_url=http://127.0.0.1:"+port) {
		t.Errorf("the readdress logged:\n%s", strings.Join(lines, "\n"))
	}
	if b.Version() != v5 {
		t.Errorf("readdress changed the version: %s, was %s", b.Version(), v5)
	}
	if u := status(t, b, again.name); u.URL != "http://127.0.0.2:"+port || !u.Available {
		t.Errorf("readdressed member: %+v", u)
	}
	if n, _ := moves(p5, placement(b, keys)); n != 0 {
		t.Errorf("readdress moved %d keys", n)
	}
	if bad := r.serveKeys(t, p5); bad > 0 {
		t.Fatalf("%d requests failed after the readdress", bad)
	}
	if again.hits.Load() == 0 {
		t.Error("the restarted app-1 got no request")
	}

	// A short answer (1 of 5 members) is ignored until it is confirmed.
	snap = b.snap.Load()
	z.SetSRV(srvName, f.targets[0])
	if r.poll(t) || b.snap.Load() != snap {
		t.Fatal("a short answer changed the membership at once")
	}
	if !strings.Contains(r.logs.String(), "change=guarded") {
		t.Errorf("no guarded line logged:\n%s", r.logs)
	}
	f.publish()
	r.poll(t) // the full answer again: the count starts over

	// SERVFAIL and a silent resolver keep the membership; no request fails.
	for _, fail := range []func(bool){
		func(on bool) {
			if on {
				z.SetRcode(srvName, dns.RcodeServerFailure)
			} else {
				z.SetRcode(srvName, 0)
			}
		},
		func(on bool) { z.SetSilent(srvName, on) },
	} {
		fail(true)
		errs := metric(t, r.reg, "ringlb_discovery_errors_total", "source="+srvName)
		if r.poll(t) || b.snap.Load() != snap {
			t.Fatal("a failed query changed the membership")
		}
		if got := metric(t, r.reg, "ringlb_discovery_errors_total", "source="+srvName); got != errs+1 {
			t.Errorf("errors_total %v, want %v", got, errs+1)
		}
		if bad := r.serveKeys(t, p5); bad > 0 {
			t.Fatalf("%d requests failed while DNS failed", bad)
		}
		if st := b.Status().Discovery; len(st) != 1 || st[0].LastError == "" || st[0].Members != 5 {
			t.Errorf("discovery status while failing: %+v", st)
		}
		fail(false)
	}
	if r.poll(t) || !strings.Contains(r.logs.String(), "change=recovered") {
		t.Error("the answer after failures: a change, or no recovered line")
	}

	// Scale-in: app-4 leaves the answer. It is absent at once (its keys
	// go to their next member, nothing else moves, the version stays),
	// then removed after remove_after (the version goes back to the
	// 4-member one and every key is home).
	f.live[4] = false
	f.publish()
	logged = len(r.logs.String())
	if !r.poll(t) {
		t.Fatal("scale-in: no change")
	}
	// One log line for the change, naming the member.
	if lines := strings.Split(strings.TrimSpace(r.logs.String()[logged:]), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "member="+newcomer) || !strings.Contains(lines[0], "change=absent") {
		t.Errorf("the absence logged:\n%s", strings.Join(lines, "\n"))
	}
	if b.Version() != v5 {
		t.Errorf("absence changed the version")
	}
	u := status(t, b, newcomer)
	if !u.Absent || u.Available || u.Ejection == nil || u.Ejection.Cause != "absent" {
		t.Errorf("absent member: %+v", u)
	}
	pAbsent := placement(b, keys)
	for k, o := range p5 {
		if o != newcomer && pAbsent[k] != o {
			t.Fatalf("key %s of %s moved to %s", k, o, pAbsent[k])
		}
		if o == newcomer {
			lr := b.Lookup(k)
			if !hasSkip(lr, newcomer, ring.Absent) || lr.Chosen != p4[k] {
				t.Fatalf("key %s of the absent member: %+v (before it joined: %s)", k, lr, p4[k])
			}
		}
	}
	if bad := r.serveKeys(t, pAbsent); bad > 0 {
		t.Fatalf("%d requests failed with a member absent", bad)
	}
	if got := metric(t, r.reg, "ringlb_upstream_available", "upstream="+newcomer); got != 0 {
		t.Errorf("available gauge of the absent member: %v", got)
	}
	// Absent, not ejected: the absent gauge tells the two apart.
	if got := metric(t, r.reg, "ringlb_upstream_absent", "upstream="+newcomer, "pool=default"); got != 1 {
		t.Errorf("absent gauge of the absent member: %v, want 1", got)
	}
	if got := metric(t, r.reg, "ringlb_upstream_absent", "upstream="+f.bes[0].name, "pool=default"); got != 0 {
		t.Errorf("absent gauge of a present member: %v, want 0", got)
	}
	if got := metric(t, r.reg, "ringlb_ejections_total", "upstream="+newcomer); got > 0 {
		t.Errorf("absence counted as an ejection: %v", got)
	}
	if !testenv.Poll(5*time.Second, func() bool { r.poll(t); return b.Version() == v4 }) {
		t.Fatalf("absent member not removed: version %s, want %s", b.Version(), v4)
	}
	if n, _ := moves(p4, placement(b, keys)); n != 0 {
		t.Errorf("after the removal %d keys are not home", n)
	}
	if got := metric(t, r.reg, "ringlb_requests_total", "upstream="+newcomer); got != -1 {
		t.Errorf("the removed member's requests_total series is still exported: %v", got)
	}
	if got := metric(t, r.reg, "ringlb_discovery_members", "source="+srvName); got != 4 {
		t.Errorf("discovery_members %v, want 4", got)
	}
	// Updates: first answer, scale-out, readdress, absence, removal.
	if got := metric(t, r.reg, "ringlb_discovery_updates_total", "source="+srvName); got != 5 {
		t.Errorf("discovery_updates_total %v, want 5", got)
	}
}

// The members of a source's first answer start fully active; members
// that join later slow-start, as a reload would add them.
func TestDiscoverySlowStart(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 3)
	f.publish()
	opts := discOptions(z, nil, srvSource(srvName))
	opts.Ring.SlowStart = time.Hour
	r := newDiscRig(t, z, opts)
	r.poll(t)
	for _, u := range r.b.Status().Upstreams {
		if u.ActiveFraction != 1 {
			t.Errorf("first-answer member %s: active_fraction %v, want 1", u.Name, u.ActiveFraction)
		}
	}
	newcomer := f.add(t)
	f.publish()
	r.poll(t)
	if u := status(t, r.b, newcomer); u.ActiveFraction >= 0.01 {
		t.Errorf("newcomer: active_fraction %v, want about 0", u.ActiveFraction)
	}
}

// Before the first answer there are no members: 503 and not ready. A
// persistent empty answer (NXDOMAIN) leaves nothing available once
// confirmed; the next real answer brings everything back.
func TestDiscoveryEmptyAnswer(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 3)
	opts := discOptions(z, nil, srvSource(srvName))
	opts.Discovery.Confirm = 2
	r := newDiscRig(t, z, opts)
	r.poll(t) // NXDOMAIN: still nothing
	get503 := func(when string) {
		t.Helper()
		if code, _, _ := get(t, r.client, r.front.URL+"/?user=u1"); code != http.StatusServiceUnavailable {
			t.Errorf("%s: %d, want 503", when, code)
		}
		if r.b.Ready() {
			t.Errorf("%s: ready", when)
		}
	}
	get503("before the first answer")
	if lr := r.b.Lookup("u1"); lr.Owner != "" || lr.Chosen != "" || len(lr.Preference) != 0 {
		t.Errorf("lookup on an empty ring: %+v", lr)
	}

	f.publish()
	r.poll(t)
	all := placement(r.b, testKeys(300))
	if bad := r.serveKeys(t, all); bad > 0 || !r.b.Ready() {
		t.Fatalf("after the first answer: %d failed, ready %v", bad, r.b.Ready())
	}

	z.Reset() // NXDOMAIN from now on
	r.poll(t)
	if bad := r.serveKeys(t, all); bad > 0 {
		t.Fatalf("one empty answer (unconfirmed): %d failed", bad)
	}
	r.poll(t)
	get503("after a confirmed empty answer")
	for _, u := range r.b.Status().Upstreams {
		if !u.Absent {
			t.Errorf("%s not absent", u.Name)
		}
	}

	f2 := &fleet{z: z, bes: f.bes, targets: f.targets, live: f.live}
	for i := range f2.bes {
		z.SetAddrs(fmt.Sprintf("app-%d.test", i), "127.0.0.1")
	}
	f2.publish()
	r.poll(t)
	if bad := r.serveKeys(t, all); bad > 0 || !r.b.Ready() {
		t.Fatalf("after recovery: %d failed, ready %v", bad, r.b.Ready())
	}
}

// A records: one member per address, named address:port; removing an
// address moves only its keys.
func TestDiscoveryHostRecords(t *testing.T) {
	z := dnstest.New(t)
	var bes []*backend
	port := 0
	for attempt := 0; len(bes) < 3 && attempt < 20; attempt++ {
		bes = bes[:0]
		first, p := appBackend(t, "127.0.0.1", "127.0.0.1", 0)
		bes, port = append(bes, first), p
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				break // the port is taken on that address: try another
			}
			ln.Close()
			be, _ := appBackend(t, ip, ip, p)
			bes = append(bes, be)
		}
	}
	if len(bes) < 3 {
		t.Skip("no port free on 127.0.0.1-3")
	}
	z.SetAddrs("cache.test", "127.0.0.3", "127.0.0.1", "127.0.0.2")
	opts := discOptions(z, nil, discovery.Source{Host: "cache.test", Port: port, Scheme: "http", Weight: 1})
	r := newDiscRig(t, z, opts)
	r.poll(t)
	want := []string{bes[0].name, bes[1].name, bes[2].name}
	if got := memberNames(r.b); !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	keys := testKeys(3000)
	before := placement(r.b, keys)
	if bad := r.serveKeys(t, before); bad > 0 {
		t.Fatal("requests failed")
	}
	z.SetAddrs("cache.test", "127.0.0.1", "127.0.0.3")
	r.poll(t)
	after := placement(r.b, keys)
	for k, o := range before {
		if o != bes[1].name && after[k] != o {
			t.Fatalf("key %s moved from %s to %s", k, o, after[k])
		}
		if o == bes[1].name && after[k] == o {
			t.Fatalf("key %s stayed on the removed address", k)
		}
	}
	if bad := r.serveKeys(t, after); bad > 0 {
		t.Fatal("requests failed after the removal")
	}
}

// A discovered name equal to a static upstream's: the static one wins,
// and the clash is logged once.
func TestDiscoveryStaticWins(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 2)
	f.publish()
	static := newBackend(t, f.bes[0].name)
	opts := discOptions(z, upstreamsOf(t, static), srvSource(srvName))
	r := newDiscRig(t, z, opts)
	r.poll(t)
	if got := memberNames(r.b); !slices.Equal(got, f.names(false)) {
		t.Fatalf("members %v", got)
	}
	u := status(t, r.b, static.name)
	if u.Source != "static" || u.URL != static.srv.URL {
		t.Errorf("clashing name: %+v, want the static upstream", u)
	}
	if n := r.logs.count("discovery: a discovered member has a static upstream's name; the static one is kept"); n != 1 {
		t.Errorf("clash logged %d times:\n%s", n, r.logs)
	}
	f.add(t)
	f.publish()
	r.poll(t)
	if n := r.logs.count("discovery: a discovered member has a static upstream's name; the static one is kept"); n != 1 {
		t.Errorf("clash logged %d times after another change", n)
	}
}

// Update (a reload) reconfigures discovery and resolves at once; removing
// the block drops the discovered members; a bad block changes nothing.
func TestDiscoveryReload(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 3)
	f.publish()
	static := newBackend(t, "static")
	opts := discOptions(z, upstreamsOf(t, static), srvSource(srvName))
	r := newDiscRig(t, z, opts)
	r.poll(t)
	if len(r.b.Members()) != 4 {
		t.Fatalf("members %v", memberNames(r.b))
	}

	// A bad block is rejected; membership and discovery carry on.
	bad := opts
	bad.Discovery = &discovery.Options{Resolver: z.Addr, Interval: time.Hour, Timeout: time.Second, Confirm: 0, Sources: opts.Discovery.Sources}
	v := r.b.Version()
	if _, err := r.b.Update(bad); err == nil || !strings.Contains(err.Error(), "confirm") {
		t.Fatalf("bad block: err %v", err)
	}
	if r.b.Version() != v || len(r.b.Members()) != 4 || r.b.disc.run.Discoverer() == nil {
		t.Fatal("a rejected block changed the membership")
	}

	// A second source: the reload resolves it at once.
	z.SetAddrs("cache.test", "127.0.0.1")
	next := opts
	next.Discovery = &discovery.Options{
		Resolver: z.Addr, Interval: time.Hour, Timeout: time.Second, RemoveAfter: time.Hour, Confirm: 3,
		Sources: []discovery.Source{srvSource(srvName), {Host: "cache.test", Port: 1, Scheme: "http", Weight: 2}},
	}
	if _, err := r.b.Update(next); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(5*time.Second, func() bool { return len(r.b.Members()) == 5 }) {
		t.Fatalf("the new source was not resolved at once: %v", memberNames(r.b))
	}
	if u := status(t, r.b, "127.0.0.1:1"); u.Weight != 2 || u.Source != "cache.test" {
		t.Errorf("new source's member: %+v", u)
	}
	if got := metric(t, r.reg, "ringlb_discovery_members", "source=cache.test"); got != 1 {
		t.Errorf("discovery_members{cache.test} = %v", got)
	}

	// A source dropped from the block takes its members (and its series)
	// with it; the source that stays keeps its members.
	if _, err := r.b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(5*time.Second, func() bool { return len(r.b.Members()) == 4 }) {
		t.Fatalf("the dropped source's member stayed: %v", memberNames(r.b))
	}
	if got := metric(t, r.reg, "ringlb_discovery_members", "source=cache.test"); got != -1 {
		t.Errorf("the dropped source's series: %v", got)
	}
	if got := metric(t, r.reg, "ringlb_discovery_members", "source="+srvName); got != 3 {
		t.Errorf("the remaining source's members: %v", got)
	}

	// Removing the block leaves the static upstreams only, at once, and
	// the discovery series go.
	if _, err := r.b.Update(baseOptions(upstreamsOf(t, static))); err != nil {
		t.Fatal(err)
	}
	if got := memberNames(r.b); !slices.Equal(got, []string{"static"}) {
		t.Fatalf("members after removing the block: %v", got)
	}
	if got := metric(t, r.reg, "ringlb_discovery_members", "source="+srvName); got != -1 {
		t.Errorf("discovery series left after the block went: %v", got)
	}
	if st := r.b.Status().Discovery; st != nil {
		t.Errorf("discovery status without a block: %+v", st)
	}
	// Adding it back starts a new Discoverer.
	if _, err := r.b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(5*time.Second, func() bool { return len(r.b.Members()) == 4 }) {
		t.Fatalf("block added back: members %v", memberNames(r.b))
	}
}

// Discovery with placement nginx is rejected: nginx's identity is the
// written host:port.
func TestDiscoveryNeedsPlacementRinglb(t *testing.T) {
	z := dnstest.New(t)
	opts := discOptions(z, nil, srvSource(srvName))
	opts.Ring.Placement = "nginx"
	opts.Ring.PointsPerWeight = 160
	if _, err := New(opts, nil, nil); err == nil || !strings.Contains(err.Error(), "placement ringlb") {
		t.Fatalf("err %v", err)
	}
	opts.Ring.Placement = ""
	opts.Discovery = nil
	if _, err := New(opts, nil, nil); err == nil {
		t.Fatal("no upstreams and no discovery: no error")
	}
}

// Surviving members keep their state through a discovery change: a
// health verdict, a request in flight, the upstream itself.
func TestDiscoveryKeepsState(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 3)
	f.publish()
	r := newDiscRig(t, z, discOptions(z, nil, srvSource(srvName)))
	b := r.b
	r.poll(t)
	down, busy := f.bes[0].name, f.bes[1].name
	b.HealthReporter().SetHealthy(down, false, "test")
	release := make(chan struct{})
	var released sync.Once
	// However the test ends, the held request is let go, so that closing
	// the upstream does not wait for it forever.
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	started := make(chan struct{})
	var once sync.Once
	hooks.Store(f.bes[1], func() {
		once.Do(func() { close(started) })
		<-release
	})
	t.Cleanup(func() { hooks.Delete(f.bes[1]) })
	key := ""
	for _, k := range testKeys(1000) {
		if b.Lookup(k).Chosen == busy {
			key = k
			break
		}
	}
	done := make(chan int)
	go func() {
		res, err := r.client.Get(r.front.URL + "/?user=" + key)
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-started
	before := b.ups[busy]

	f.add(t)
	f.publish()
	// The poll applies the new member, unless the discoverer's own timer
	// got there first.
	r.poll(t)
	if n := len(b.snap.Load().members); n != 4 {
		t.Fatalf("%d members after the fourth was published, want 4", n)
	}
	if u := status(t, b, down); u.Health != "down" || u.Available {
		t.Errorf("the unhealthy member after the change: %+v", u)
	}
	if u := status(t, b, busy); u.Inflight != 1 {
		t.Errorf("the busy member after the change: %+v", u)
	}
	b.mu.Lock()
	same := b.ups[busy] == before
	b.mu.Unlock()
	if !same {
		t.Error("the busy member's state was replaced")
	}
	released.Do(func() { close(release) })
	if code := <-done; code != 200 {
		t.Errorf("the request in flight through the change: %d", code)
	}
	if u := status(t, b, busy); u.Inflight != 0 {
		t.Errorf("in flight after it finished: %d", u.Inflight)
	}
}

// A discovered member takes its source's protocol.
func TestDiscoveryProtocol(t *testing.T) {
	z := dnstest.New(t)
	z.SetAddrs("grpc.test", "127.0.0.1")
	src := discovery.Source{Host: "grpc.test", Port: 9000, Scheme: "http", Protocol: "h2c", Weight: 1}
	r := newDiscRig(t, z, discOptions(z, nil, src))
	r.poll(t)
	s := r.b.snap.Load()
	if len(s.members) != 1 || s.members[0].name != "127.0.0.1:9000" || s.members[0].protocol != transport.H2C {
		t.Fatalf("members %+v", s.members)
	}
}
