package healthcheck

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A target's Transport sends its probes: an upstream that speaks only
// cleartext HTTP/2 fails probes over the Checker's HTTP/1.1 client and
// passes them over an h2c transport.
func TestTargetTransport(t *testing.T) {
	var h2 atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
	}))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetUnencryptedHTTP2(true) // no HTTP/1.1 at all
	s.Start()
	t.Cleanup(s.Close)

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: p}
	t.Cleanup(h2c.CloseIdleConnections)

	rec := newRecorder(nil)
	c := New(fast(1, 1), rec, testLogger(t))
	c.Update(fast(1, 1), []Target{
		{Name: "plain", URL: mustURL(t, s.URL)},
		{Name: "h2c", URL: mustURL(t, s.URL), Transport: h2c},
	})
	run(t, c)
	if ev := rec.next(t); ev.name != "plain" || ev.up {
		t.Fatalf("first transition %+v; want plain down (HTTP/1.1 to an h2c-only server)", ev)
	}
	deadline := time.Now().Add(wait)
	for h2.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes over HTTP/2 within %v; want 3", h2.Load(), wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.none(t) // reports come before the next probe: h2c never went down
	if up, _ := c.Healthy("h2c"); !up {
		t.Error("h2c target is down")
	}
}
