package balancer

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/internal/testutil/redistest"
)

// BenchmarkServeHTTPHold is BenchmarkServeHTTP (serial) with hold off, on
// (every key recorded under the current ring: a lookup and a refresh per
// request), held (after a scale-out, every key has a record of the old
// ring: the held upstream is judged too; a fifth of the keys go where the
// new ring would not send them), and with the signed cookie (each request
// carries its valid cookie: one HMAC per request), and shared through a
// real redis-server in steady state.
func BenchmarkServeHTTPHold(b *testing.B) {
	bes := []*backend{newBackend(b, "a"), newBackend(b, "b"), newBackend(b, "c")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	d := newBackend(b, "d")
	d.handle = bes[0].handle
	base := baseOptions(upstreamsOf(b, bes...))
	base.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
	base.Timeouts.Read = time.Minute
	on := base
	on.Hold = hold.Options{Idle: time.Hour, MaxKeys: 1_000_000}
	cookie := on
	cookie.Hold.Cookie.Name = "ringlb_hold"
	cookie.Hold.Cookie.Secrets = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	scaled := func(o Options) Options {
		o.Upstreams = upstreamsOf(b, append(bes, d)...)
		return o
	}
	newReqs := func() []*http.Request {
		reqs := make([]*http.Request, 1024)
		for i := range reqs {
			r, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://shop.example/item?id=%d", i), nil)
			r.Header.Set("X-User-ID", fmt.Sprint("user-", i))
			r.RemoteAddr = "192.0.2.1:5555"
			r.RequestURI = r.URL.RequestURI()
			reqs[i] = r
		}
		return reqs
	}
	// share: hold shared through a real redis-server, in steady state
	// (idle has passed since the last ring change, so no request asks the
	// store, and every key was written once).
	var srv *redistest.Server
	if _, err := exec.LookPath("redis-server"); err == nil {
		srv = redistest.Start(b, redistest.Options{})
	}
	shared := on
	for _, tc := range []struct {
		name        string
		opts, after Options
		cookies     bool
	}{
		{"off", base, base, false},
		{"on", on, on, false},
		{"share", shared, shared, false},
		{"held", on, scaled(on), false},
		{"cookie-held", cookie, scaled(cookie), true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var clk *fakeClock
			if tc.name == "share" {
				if srv == nil {
					b.Skip("redis-server not installed")
				}
				tc.opts.Hold.Share = share.Options{Redis: srv.URL(), Prefix: "bench:", Timeout: time.Second}
				tc.after = tc.opts
				clk = newFakeClock()
			}
			bal, err := New(tc.opts, metrics.NewRegistry(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bal.Close()
			if clk != nil { // past idle since the start: steady state
				clk.install(bal)
				if _, err := bal.Update(tc.opts); err != nil {
					b.Fatal(err)
				}
				clk.advance(tc.opts.Hold.Idle + time.Second)
			}
			reqs := newReqs()
			w := &discardWriter{h: http.Header{}}
			for _, r := range reqs { // every key served once
				clear(w.h)
				bal.ServeHTTP(w, r)
				if tc.cookies {
					for _, c := range (&http.Response{Header: w.h}).Cookies() {
						r.AddCookie(c)
					}
				}
			}
			if _, err := bal.Update(tc.after); err != nil {
				b.Fatal(err)
			}
			if clk != nil {
				for bal.hold.Counts.Written.Load() < uint64(len(reqs)) { // the first visits' writes
					time.Sleep(time.Millisecond)
				}
				asked := bal.hold.Counts.Snapshot()
				defer func() {
					if now := bal.hold.Counts.Snapshot(); now.Found+now.None+now.LookupErrors != asked.Found+asked.None+asked.LookupErrors {
						b.Errorf("the store was asked in steady state")
					}
				}()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				bal.ServeHTTP(w, reqs[i&1023])
			}
		})
	}
}

// BenchmarkHoldRequestPath is what hold adds to one request, without the
// proxying: the record lookup, rule 11 (with the held upstream judged
// when the record applies), the choice and the record after serving, for
// 1024 keys after a scale-out (so every key has a record of the old ring).
// It must not allocate.
func BenchmarkHoldRequestPath(b *testing.B) {
	var ups []options.Upstream
	for i := range 5 {
		u, _ := url.Parse(fmt.Sprintf("http://10.0.0.%d:80", i+1))
		ups = append(ups, options.Upstream{Name: fmt.Sprint("app-", i), URL: u, Weight: 1})
	}
	opts := baseOptions(ups[:4])
	opts.Hold = hold.Options{Idle: time.Hour, MaxKeys: 1_000_000}
	bal, err := New(opts, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bal.Close()
	s := bal.snap.Load()
	pos := make([]uint64, 1024)
	for i := range pos {
		pos[i] = s.ring.Hash(fmt.Sprint("user-", i))
		bal.hold.Store().Record(pos[i], s.members[s.ring.Owner(pos[i])].u.name, s.hold.Current, bal.nanotime())
	}
	opts.Upstreams = ups
	if _, err := bal.Update(opts); err != nil {
		b.Fatal(err)
	}
	s = bal.snap.Load()
	r, _ := http.NewRequest(http.MethodGet, "http://shop.example/", nil)
	b.ReportAllocs()
	sink := 0
	for i := 0; b.Loop(); i++ {
		var q hold.Request
		bal.holdBegin(s, r, pos[i&1023], &q)
		c := bal.choose(s, pos[i&1023], nil, &q)
		s.hold.Record(&q, s.members[c.Member].u.name, bal.nanotime(), bal.clk)
		sink += c.Member
	}
	_ = sink
}

// BenchmarkServeHTTPHandoff is what handoff (rule 17) costs a request:
// off; on, for requests that carry no header (steady state); and on, for
// requests that all carry one (their keys' owner drains, so each names
// it to the upstream it goes to). The header's values are made when the
// snapshot is, so carrying one allocates nothing either.
func BenchmarkServeHTTPHandoff(b *testing.B) {
	bes := []*backend{newBackend(b, "a"), newBackend(b, "b"), newBackend(b, "c")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	base := baseOptions(upstreamsOf(b, bes...))
	base.Timeouts.Read = time.Minute
	on := base
	on.Handoff = handoff.Options{Header: "Ringlb-Handoff", Window: 5 * time.Minute}
	// off-alike: handoff off, the client sending a header of the same
	// name length and value length, for the cost of one more header field
	// upstream (the transport writing it, the test upstream reading it)
	// that is not ringlb's.
	for _, tc := range []struct {
		name  string
		opts  Options
		drain bool
	}{{"off", base, false}, {"off-alike", base, true}, {"on", on, false}, {"header", on, true}} {
		b.Run(tc.name, func(b *testing.B) {
			bal, err := New(tc.opts, metrics.NewRegistry(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bal.Close()
			var reqs []*http.Request
			for i := 0; len(reqs) < 1024; i++ {
				k := fmt.Sprint("user-", i)
				if tc.drain && bal.Lookup(k).Owner != "a" {
					continue
				}
				r, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://shop.example/item?id=%d", i), nil)
				r.Header.Set("X-User-ID", k)
				r.RemoteAddr = "192.0.2.1:5555"
				r.RequestURI = r.URL.RequestURI()
				reqs = append(reqs, r)
			}
			if tc.drain {
				if _, err := bal.SetState("a", state.Drain); err != nil {
					b.Fatal(err)
				}
			}
			if tc.name == "off-alike" {
				for _, r := range reqs {
					r.Header.Set("Ringlb-Handofx", `name="a", url="`+bes[0].srv.URL+`"`)
				}
			}
			w := &discardWriter{h: http.Header{}}
			for _, r := range reqs {
				clear(w.h)
				bal.ServeHTTP(w, r)
			}
			before := bal.metricsHandoffs()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				bal.ServeHTTP(w, reqs[i&1023])
			}
			if carried := bal.metricsHandoffs() - before; (tc.drain && tc.opts.Handoff.Header != "") != (carried > 0) {
				b.Errorf("%v requests carried the header", carried)
			}
		})
	}
}
