package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
)

// serveLean is the -server lean experiment: what the floor costs when the
// server under ReverseProxy does only what this benchmark needs. One
// goroutine per connection reads a request with http.ReadRequest, runs the
// handler, writes the response head and body through one buffer and
// flushes once. Left out, compared with net/http's server: the background
// read that notices a client leaving during a request (and the goroutine,
// deadline changes and wakeups it costs), per-request cancellable
// contexts, timeouts, the Date header, chunked responses, 100-continue,
// HTTP/1.0 rules, hijacking, Flush and every protection against a hostile
// client. It is a measurement, not a server: it answers well-formed
// keep-alive GETs whose upstream response has a Content-Length, which is
// all bench/run.sh sends.
func serveLean(ln net.Listener, h http.Handler) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go leanConn(c, h)
	}
}

func leanConn(c net.Conn, h http.Handler) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4<<10)
	bw := bufio.NewWriterSize(c, 4<<10)
	remote := c.RemoteAddr().String()
	ctx := context.Background()
	w := &leanWriter{bw: bw}
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.RemoteAddr = remote
		req = req.WithContext(ctx)
		w.reset()
		h.ServeHTTP(w, req)
		if !w.wrote {
			w.WriteHeader(http.StatusOK)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil || bw.Flush() != nil || req.Close {
			return
		}
	}
}

// leanWriter writes a response with the Content-Length its header has.
type leanWriter struct {
	bw    *bufio.Writer
	h     http.Header
	wrote bool
}

func (w *leanWriter) reset() {
	w.h, w.wrote = make(http.Header, 4), false
}

func (w *leanWriter) Header() http.Header { return w.h }

func (w *leanWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if _, ok := w.h["Content-Length"]; !ok {
		w.h["Content-Length"] = []string{"0"}
	}
	w.bw.WriteString("HTTP/1.1 ")
	w.bw.WriteString(strconv.Itoa(code))
	w.bw.WriteByte(' ')
	w.bw.WriteString(http.StatusText(code))
	w.bw.WriteString("\r\n")
	_ = w.h.Write(w.bw)
	w.bw.WriteString("\r\n")
}

func (w *leanWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.bw.Write(p)
}
