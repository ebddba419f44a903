// Command upstream is a minimal, fast HTTP upstream for ringlb's benchmark
// harness (bench/run.sh). It answers every request with a small fixed body
// naming itself ("ok from NAME\n"), logs nothing, and does no per-request
// work beyond writing that body, so that a benchmark measures the proxy in
// front of it rather than the upstream.
//
// GET /_stats answers "conns N\n": the connections accepted so far, which
// tells the harness whether a proxy keeps its upstream connections alive or
// keeps opening new ones.
//
// GET /sse/... answers a text/event-stream of ?events=N (default 1000)
// events, "data: ok from NAME\n\n" each, every one written and flushed on
// its own as a server of server-sent events does, as fast as it can: the
// stream bench/run.sh's sse feature rows send through ringlb.
//
// With -raw it answers from a loop of its own over each TCP connection
// instead of net/http's server (raw.go): the same responses for a fraction
// of the CPU, so that the core it shares with the load generator has room
// to spare at a constant rate (bench/run.sh RAW_UPSTREAM=1).
//
//	go run ./bench/upstream -listen 127.0.0.1:19001 -name u1
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:19001", "address to listen on")
	name := flag.String("name", "upstream", "name returned in the body")
	raw := flag.Bool("raw", false, "answer from a minimal HTTP/1.1 loop of its own instead of net/http's server")
	flag.Parse()
	if *raw {
		if err := serveRaw(*listen, *name); err != nil {
			fmt.Fprintln(os.Stderr, "upstream:", err)
			os.Exit(1)
		}
		return
	}

	var conns atomic.Int64
	body := []byte("ok from " + *name + "\n")
	length := strconv.Itoa(len(body))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		if r.URL.Path == "/_stats" {
			_, _ = fmt.Fprintf(w, "conns %d\n", conns.Load())
			return
		}
		if strings.HasPrefix(r.URL.Path, "/sse/") {
			serveEvents(w, sseEvents(r.URL.RawQuery), body)
			return
		}
		h["Content-Length"] = []string{length}
		_, _ = w.Write(body)
	})

	srv := &http.Server{
		Addr:              *listen,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // no logging, not even of client errors
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		os.Exit(1)
	}
}

// defaultEvents is how many events an /sse/ stream has without ?events=.
const defaultEvents = 1000

// sseEvents reads events=N from a raw query; defaultEvents when absent or
// not a positive number.
func sseEvents(query string) int {
	for query != "" {
		var kv string
		kv, query, _ = strings.Cut(query, "&")
		if v, ok := strings.CutPrefix(kv, "events="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return defaultEvents
}

// sseEvent is one event of a stream: "data: " and the body naming the
// upstream, then the blank line that ends an event.
func sseEvent(body []byte) []byte {
	return append(append([]byte("data: "), body...), '\n')
}

// serveEvents writes n events, flushing each.
func serveEvents(w http.ResponseWriter, n int, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	ev := sseEvent(body)
	rc := http.NewResponseController(w)
	for range n {
		if _, err := w.Write(ev); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}
