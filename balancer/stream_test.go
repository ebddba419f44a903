package balancer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/ring"
)

// sseBackend streams n events ("data: i") gap apart, as a model server
// streams tokens; started, when not nil, gets the request as it begins,
// and ended its context's error once the handler ends.
func sseBackend(t testing.TB, name string, n int, gap time.Duration, started chan<- *http.Request, ended chan<- error) *backend {
	be := newBackend(t, name)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if started != nil {
			started <- r
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i := range n {
			if i > 0 {
				select {
				case <-time.After(gap):
				case <-r.Context().Done():
					if ended != nil {
						ended <- r.Context().Err()
					}
					return
				}
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
		if ended != nil {
			ended <- r.Context().Err()
		}
	}
	return be
}

// sseOptions is one upstream, keyed on the X-User-ID header.
func sseOptions(t testing.TB, bes ...*backend) Options {
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	return opts
}

// readEvents reads the events of an SSE response and when each came,
// since start.
func readEvents(t testing.TB, body io.Reader, start time.Time) (events []string, at []time.Duration) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			events = append(events, line)
			at = append(at, time.Since(start))
		}
	}
	return events, at
}

// TestSSEFlushedPerEvent: each event of a text/event-stream answer
// reaches the client when the upstream sends it, not when the stream
// ends: the first arrives long before the last.
func TestSSEFlushedPerEvent(t *testing.T) {
	const n, gap = 6, 80 * time.Millisecond
	be := sseBackend(t, "a", n, gap, nil, nil)
	_, _, front := proxy(t, sseOptions(t, be))
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-User-ID", "u1")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	events, at := readEvents(t, res.Body, start)
	if len(events) != n {
		t.Fatalf("got %d events %q, want %d", len(events), events, n)
	}
	total := time.Duration(n-1) * gap
	if at[0] > total/2 || at[n-1]-at[0] < total*3/4 {
		t.Errorf("events came at %v: the first should come at once, the last about %v after it", at, total)
	}
	for i := 1; i < n; i++ {
		if d := at[i] - at[i-1]; d < gap/2 {
			t.Errorf("event %d came %v after the one before, want about %v: held back and sent together", i, d, gap)
		}
	}
}

// TestStreamInFlightToTheEnd: a streamed answer holds its upstream's
// in-flight slot until its last byte, so bounded loads count a long
// generation: while it streams, the gauge says 1 and (with a floor of 1)
// the upstream is full for other keys; once it ends, 0.
func TestStreamInFlightToTheEnd(t *testing.T) {
	started := make(chan *http.Request, 1)
	ended := make(chan error, 1)
	a := sseBackend(t, "a", 5, 60*time.Millisecond, started, ended)
	other := newBackend(t, "b")
	opts := sseOptions(t, a, other)
	opts.Ring.LoadFactor, opts.Ring.LoadFloor = 1.25, 1
	b, reg, front := proxy(t, opts)
	k := keyOwnedBy(t, b, "a")
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/stream", nil)
	req.Header.Set("X-User-ID", k)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if g := metric(t, reg, "ringlb_upstream_inflight", "upstream=a"); g != 1 {
		t.Errorf("in the middle of the stream ringlb_upstream_inflight{upstream=a} = %v, want 1", g)
	}
	if lr := b.Lookup(keyOwnedBy(t, b, "a") + "x"); lr.Owner == "a" && !hasSkip(lr, "a", ring.Full) {
		t.Errorf("in the middle of the stream a lookup owned by a: %+v; want a skipped as full", lr)
	}
	io.Copy(io.Discard, br)
	res.Body.Close()
	<-ended
	if !testenv.Poll(2*time.Second, func() bool { return metric(t, reg, "ringlb_upstream_inflight", "upstream=a") == 0 }) {
		t.Errorf("after the stream ringlb_upstream_inflight{upstream=a} = %v, want 0", metric(t, reg, "ringlb_upstream_inflight", "upstream=a"))
	}
}

// TestStreamAccessLogCoversTheStream: the access log line of a streamed
// answer is written when the stream ends: its duration covers the whole
// stream, and upstream_ttfb is the time to the response head.
func TestStreamAccessLogCoversTheStream(t *testing.T) {
	const n, gap = 5, 60 * time.Millisecond
	be := sseBackend(t, "a", n, gap, nil, nil)
	jl := newJSONLog(t)
	opts := sseOptions(t, be)
	opts.AccessLog = jl.l
	_, _, front := proxy(t, opts)
	code, _, body := get(t, http.DefaultClient, front.URL+"/stream", "X-User-ID", "u1")
	if code != 200 || strings.Count(body, "data: ") != n {
		t.Fatalf("%d %q", code, body)
	}
	var lines []map[string]any
	testenv.Poll(2*time.Second, func() bool { lines = jl.lines(t); return len(lines) == 1 })
	if len(lines) != 1 {
		t.Fatalf("access log: %v", lines)
	}
	d, _ := lines[0]["duration"].(float64)
	ttfb, _ := lines[0]["upstream_ttfb"].(float64)
	stream := (time.Duration(n-1) * gap).Seconds()
	if d < stream || ttfb <= 0 || ttfb > stream/2 {
		t.Errorf("duration %v, upstream_ttfb %v; want duration >= the stream's %v and the ttfb well within it", d, ttfb, stream)
	}
}

// TestStreamClientGoneCancelsUpstream: a client that goes away in the
// middle of a stream ends the upstream's request at once: its context
// is done within 100 ms, so the model server stops generating.
func TestStreamClientGoneCancelsUpstream(t *testing.T) {
	started := make(chan *http.Request, 1)
	ended := make(chan error, 1)
	be := sseBackend(t, "a", 1000, 20*time.Millisecond, started, ended)
	_, _, front := proxy(t, sseOptions(t, be))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/stream", nil)
	req.Header.Set("X-User-ID", "u1")
	c := &http.Client{Transport: &http.Transport{}}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	br := bufio.NewReader(res.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	gone := time.Now()
	cancel() // closes the client's connection
	select {
	case err := <-ended:
		if d := time.Since(gone); err == nil || d > 100*time.Millisecond {
			t.Errorf("the upstream's request ended %v after the client went, with %v; want its context done within 100ms", d, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's request went on after the client went")
	}
}
