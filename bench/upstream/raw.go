package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
)

// serveRaw answers HTTP/1.1 requests on listen without net/http: a
// goroutine per connection reads each request head line by line, discards
// a Content-Length or chunked body, and writes a canned response naming
// name (or the /_stats counter). It understands only what the proxies in
// front of it send; anything else closes the connection.
func serveRaw(listen, name string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	body := "ok from " + name + "\n"
	ok := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	ev := sseEvent([]byte(body))
	sseChunk := []byte(strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + string(ev) + "\r\n")
	var conns atomic.Int64
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		conns.Add(1)
		go func() {
			defer c.Close()
			br := bufio.NewReaderSize(c, 8<<10)
			for {
				stats, events, keep, err := readRequest(br)
				if err != nil {
					return
				}
				if events > 0 {
					if writeEvents(c, events, sseChunk) != nil || !keep {
						return
					}
					continue
				}
				resp := ok
				if stats {
					b := "conns " + strconv.FormatInt(conns.Load(), 10) + "\n"
					resp = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
						strconv.Itoa(len(b)) + "\r\n\r\n" + b)
				}
				if _, err := c.Write(resp); err != nil || !keep {
					return
				}
			}
		}()
	}
}

var errRequest = errors.New("unsupported request")

// sseHead starts an event stream, chunked (HTTP/1.1).
const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"

// writeEvents writes an event stream of n events, each chunk a write of
// its own (the head goes with the first), then the last chunk.
func writeEvents(c net.Conn, n int, chunk []byte) error {
	first := append([]byte(sseHead), chunk...)
	if _, err := c.Write(first); err != nil {
		return err
	}
	for range n - 1 {
		if _, err := c.Write(chunk); err != nil {
			return err
		}
	}
	_, err := c.Write([]byte("0\r\n\r\n"))
	return err
}

// readRequest reads one request, body included: whether it asked for
// /_stats, how many events it asked for (0: not an /sse/ request), and
// whether the connection stays open.
func readRequest(br *bufio.Reader) (stats bool, events int, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, 0, false, err
	}
	method, rest, _ := bytes.Cut(line, []byte(" "))
	target, proto, _ := bytes.Cut(rest, []byte(" "))
	if len(method) == 0 || len(target) == 0 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
		return false, 0, false, errRequest
	}
	stats = bytes.HasPrefix(target, []byte("/_stats"))
	if bytes.HasPrefix(target, []byte("/sse/")) {
		_, q, _ := bytes.Cut(target, []byte("?"))
		events = sseEvents(string(q))
	}
	keep = len(proto) > 7 && proto[7] == '1'
	length, chunked := int64(0), false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, 0, false, err
		}
		if len(h) <= 2 {
			break
		}
		k, v, found := bytes.Cut(h, []byte(":"))
		if !found {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(v), 10, 64); err != nil || length < 0 {
				return false, 0, false, errRequest
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			if bytes.EqualFold(v, []byte("close")) {
				keep = false
			} else if bytes.EqualFold(v, []byte("keep-alive")) {
				keep = true
			}
		}
	}
	if chunked {
		return stats, events, keep, discardChunked(br)
	}
	_, err = br.Discard(int(length))
	return stats, events, keep, err
}

// discardChunked reads a chunked body and its trailers.
func discardChunked(br *bufio.Reader) error {
	for {
		l, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		sz, _, _ := bytes.Cut(bytes.TrimSpace(l), []byte(";"))
		n, err := strconv.ParseInt(string(sz), 16, 64)
		if err != nil || n < 0 {
			return errRequest
		}
		if n == 0 {
			for { // trailers, up to the empty line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(t) <= 2 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}
