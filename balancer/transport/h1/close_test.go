package h1

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// TestCloseDuringRead: closing a response body while another goroutine is
// blocked reading it (as a read timeout that wraps the body does) ends
// that read at once with an error, closes the connection rather than
// pooling it, and leaves the transport usable.
func TestCloseDuringRead(t *testing.T) {
	checkLeaks(t)
	stall := make(chan struct{})
	gone := make(chan struct{}, 1)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stall" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "0123456789")
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
			gone <- struct{}{}
		}
	}))
	t.Cleanup(func() { close(stall) })
	tr := newTransport(t)
	req, _ := http.NewRequest("GET", u.URL+"/stall", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	e := res.Body.(*exchange)
	readErr := make(chan error, 1)
	go func() {
		_, err := res.Body.Read(make([]byte, 10))
		readErr <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for e.rs.Load() != bodyReading { // the reader is in its Read
		if time.Now().After(deadline) {
			t.Fatal("the reader never started its Read")
		}
		runtime.Gosched()
	}
	start := time.Now()
	res.Body.Close()
	if err := within(t, readErr, "the blocked Read to end after Close"); !errors.Is(err, errBodyClosed) {
		t.Errorf("blocked Read ended with %v, want %v", err, errBodyClosed)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the blocked Read took %v to end", d)
	}
	within(t, gone, "the upstream to see the connection close")
	if _, err := res.Body.Read(make([]byte, 1)); !errors.Is(err, errBodyClosed) {
		t.Errorf("Read after Close: %v, want %v", err, errBodyClosed)
	}
	res.Body.Close() // a second Close does nothing
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("%d idle after a body closed mid-read, want 0", n)
	}
	if _, body := get(t, tr, "GET", u.URL+"/ok", nil); body != "ok" {
		t.Errorf("next request: %q", body)
	}
	if n := tr.pool.idleCount(); n != 1 {
		t.Errorf("%d idle after the next request, want 1", n)
	}
}
