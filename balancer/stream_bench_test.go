package balancer

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// streamRig is a Balancer in front of an upstream that answers every
// request with n server-sent events, each written and flushed on its
// own, in lock step with the client: the next is written once the client
// has read the one before. So every event is a read and a flush of its
// own in ringlb, as the tokens of a generation are.
type streamRig struct {
	c   *http.Client
	url string
	n   int
	ack chan struct{}
	br  *bufio.Reader
}

var streamEvent = []byte(`data: {"choices":[{"delta":{"content":"token"}}]}` + "\n\n")

func newStreamRig(tb testing.TB, n int) *streamRig {
	sr := &streamRig{n: n, ack: make(chan struct{}, 1), br: bufio.NewReaderSize(nil, 4096)}
	be := newBackend(tb, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range n {
			w.Write(streamEvent)
			f.Flush()
			select {
			case <-sr.ack:
			case <-r.Context().Done():
				return
			}
		}
	}
	opts := sseOptions(tb, be)
	opts.Timeouts.Read = 30 * time.Second // a silence timer, reset on every read
	_, _, front := proxy(tb, opts)
	sr.c = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	tb.Cleanup(sr.c.CloseIdleConnections)
	sr.url = front.URL + "/v1/chat/completions"
	return sr
}

// once streams one answer, reading it event by event.
func (sr *streamRig) once(tb testing.TB) {
	req, _ := http.NewRequest(http.MethodGet, sr.url, nil)
	req.Header.Set("X-User-ID", "u1")
	res, err := sr.c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	sr.br.Reset(res.Body)
	for i := range sr.n {
		if _, err := sr.br.Discard(len(streamEvent)); err != nil {
			tb.Fatalf("event %d: %v", i, err)
		}
		sr.ack <- struct{}{}
	}
	if n, _ := io.Copy(io.Discard, sr.br); n != 0 {
		tb.Fatalf("%d bytes after the events", n)
	}
}

// BenchmarkStream: one streamed answer of 10 or 1000 events through a
// Balancer, each event its own read and flush (upstream server and
// client in the same process, so their allocations count too). The
// allocations per answer are about the same for both: streaming
// allocates nothing per event.
func BenchmarkStream(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("%d-events", n), func(b *testing.B) {
			sr := newStreamRig(b, n)
			b.ReportAllocs()
			defer testenv.ReportCPU(b)()
			for b.Loop() {
				sr.once(b)
			}
		})
	}
}

// TestStreamAllocsPerEvent: a 1000-event answer, each event its own read
// and flush, allocates no more than a 10-event one, give or take a few:
// no allocation per event, in ringlb or around it.
func TestStreamAllocsPerEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: streams 1000 events a run")
	}
	if raceEnabled {
		t.Skip("-race allocates where a plain build does not")
	}
	allocs := func(n int) float64 {
		sr := newStreamRig(t, n)
		sr.once(t) // a warm connection and pools
		return testing.AllocsPerRun(5, func() { sr.once(t) })
	}
	few, many := allocs(10), allocs(1000)
	if many-few > 10 {
		t.Errorf("a 10-event answer takes %v allocations, a 1000-event one %v: %.2f per event", few, many, (many-few)/990)
	}
}
