//go:build e2e

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// bodyMemConfig keys on a JSON body field, with the default body_limit
// and limits.body_memory, and a client_body timeout of 5 s.
const bodyMemConfig = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
debug_pprof: true
hash:
  key: [json: prompt_cache_key]
  on_missing: reject
timeouts:
  client_body: 5s
upstreams:
`

// metricOrNone reads one unlabelled series from ringlb's /metrics; -1
// when there is none.
func metricOrNone(t *testing.T, admin, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(adminGet(t, admin+"/metrics"))
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// stalledBodies opens n connections to proxy at once, each sending a
// request head declaring a JSON body of 64 KiB and the first sent bytes
// of it, then nothing; it returns the connections.
func stalledBodies(t *testing.T, proxy string, n int, sent string) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(proxy, "http://")
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			conns[i] = c
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: lb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 64<<10, sent)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	return conns
}

// TestStalledBodyMemory: what stalled JSON bodies hold in a ringlb
// process (VmRSS, the Go heap in use, goroutines,
// ringlb_body_memory_bytes), and when they are answered. 1500
// connections that declare 64 KiB and send 20 bytes hold a 4 KiB buffer
// each, not 64; 3000 that send 60 KB each hold at most
// limits.body_memory (64 MiB): the rest get 503 at once, and those held
// get 408 after client_body (5 s). Each runs twice on one process: the
// second round runs on memory the first one used (a fresh span's pages
// are not resident until written; a reused one's are), as a process
// that has run a while does.
func TestStalledBodyMemory(t *testing.T) {
	ups := map[string]string{"gpu-1": startChecksumUpstream(t), "gpu-2": startChecksumUpstream(t)}
	for _, tc := range []struct {
		name  string
		conns int
		sent  string
	}{
		{"1500 declare 64 KiB, send 20 bytes", 1500, `{"prompt_cache_key"`},
		{"3000 declare 64 KiB, send 60 KB", 3000, `{"pad":"` + strings.Repeat("p", 60000-8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := startRinglb(t, ringlbtest.WriteConfig(t, bodyMemConfig+upstreamsBlock([]string{"gpu-1", "gpu-2"}, ups, nil)))
			waitHTTP(t, lb.admin+"/readyz")
			pid := lb.cmd.Process.Pid
			for round := 1; round <= 2; round++ {
				rss0, heap0, g0 := procStatus(t, pid, "VmRSS"), metricOrNone(t, lb.admin, "go_memstats_heap_inuse_bytes"), measure(t, lb).goroutines
				start := time.Now()
				conns := stalledBodies(t, lb.proxy, tc.conns, tc.sent)
				// Answers as they come, each with when it came.
				type answer struct {
					code int
					at   time.Duration
				}
				answers := make(chan answer, len(conns))
				for _, c := range conns {
					go func() {
						c.SetReadDeadline(time.Now().Add(15 * time.Second))
						res, err := http.ReadResponse(bufio.NewReader(c), nil)
						if err != nil {
							answers <- answer{0, time.Since(start)}
							return
						}
						io.Copy(io.Discard, res.Body)
						answers <- answer{res.StatusCode, time.Since(start)}
					}()
				}
				time.Sleep(2 * time.Second) // all read as far as they go
				rss, heap, g := procStatus(t, pid, "VmRSS"), metricOrNone(t, lb.admin, "go_memstats_heap_inuse_bytes"), measure(t, lb).goroutines
				held := metricOrNone(t, lb.admin, "ringlb_body_memory_bytes")
				t.Logf("round %d: %d connections sent in %v; 2 s later: VmRSS %.1f -> %.1f MiB (+%.1f), heap in use %.1f -> %.1f MiB (+%.1f), goroutines %d -> %d, ringlb_body_memory_bytes %.0f (%.1f MiB)",
					round, len(conns), time.Since(start).Round(time.Millisecond), float64(rss0)/1024, float64(rss)/1024, float64(rss-rss0)/1024,
					heap0/(1<<20), heap/(1<<20), (heap-heap0)/(1<<20), g0, g, held, held/(1<<20))
				codes := map[int]int{}
				var first408, last408 time.Duration
				for range conns {
					a := <-answers
					codes[a.code]++
					if a.code == http.StatusRequestTimeout {
						if first408 == 0 || a.at < first408 {
							first408 = a.at
						}
						last408 = max(last408, a.at)
					}
				}
				for _, c := range conns {
					c.Close()
				}
				t.Logf("round %d: answers within 15 s: %v (0: none); 408s from %v to %v; VmHWM %.1f MiB; refused %.0f; held after %.0f",
					round, codes, first408.Round(10*time.Millisecond), last408.Round(10*time.Millisecond), float64(procStatus(t, pid, "VmHWM"))/1024,
					metricOrNone(t, lb.admin, "ringlb_body_memory_refused_total"), metricOrNone(t, lb.admin, "ringlb_body_memory_bytes"))
				if held > 64<<20 {
					t.Errorf("ringlb_body_memory_bytes = %.0f, beyond limits.body_memory (64 MiB)", held)
				}
				if codes[0] != 0 {
					t.Errorf("%d connections got no answer within 15 s; want every one answered (503 at once or 408 after client_body)", codes[0])
				}
				if tc.conns == 1500 && (held != float64(tc.conns*4<<10) || heap-heap0 > 30<<20) {
					t.Errorf("held %.0f bytes and the heap in use grew %.1f MiB; want 4 KiB a connection, and less than 30 MiB in all", held, (heap-heap0)/(1<<20))
				}
				time.Sleep(time.Second) // the closed connections' goroutines end
			}
		})
	}
}
