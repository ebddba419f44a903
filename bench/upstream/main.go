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
