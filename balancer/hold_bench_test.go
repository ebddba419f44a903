package balancer

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkServeHTTPHold is BenchmarkServeHTTP (serial) with hold off, on
// (every key recorded under the current ring: a lookup and a refresh per
// request), held (after a scale-out, every key has a record of the old
// ring: the held upstream is judged too; a fifth of the keys go where the
// new ring would not send them), and with the signed cookie (each request
// carries its valid cookie: one HMAC per request).
func BenchmarkServeHTTPHold(b *testing.B) {
	bes := []*backend{newBackend(b, "a"), newBackend(b, "b"), newBackend(b, "c")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	d := newBackend(b, "d")
	d.handle = bes[0].handle
	base := baseOptions(upstreamsOf(b, bes...))
	base.Breaker = BreakerOptions{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
	base.Timeouts.Read = time.Minute
	on := base
	on.Hold = HoldOptions{Idle: time.Hour, MaxKeys: 1_000_000}
	cookie := on
	cookie.Hold.CookieName = "ringlb_hold"
	cookie.Hold.Secrets = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
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
	for _, tc := range []struct {
		name        string
		opts, after Options
		cookies     bool
	}{
		{"off", base, base, false},
		{"on", on, on, false},
		{"held", on, scaled(on), false},
		{"cookie-held", cookie, scaled(cookie), true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bal, err := New(tc.opts, NewRegistry(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bal.Close()
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
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				bal.ServeHTTP(w, reqs[i&1023])
			}
		})
	}
}
