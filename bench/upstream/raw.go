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
				stats, keep, err := readRequest(br)
				if err != nil {
					return
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

// readRequest reads one request, body included: whether it asked for
// /_stats, and whether the connection stays open.
func readRequest(br *bufio.Reader) (stats, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, false, err
	}
	method, rest, _ := bytes.Cut(line, []byte(" "))
	target, proto, _ := bytes.Cut(rest, []byte(" "))
	if len(method) == 0 || len(target) == 0 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
		return false, false, errRequest
	}
	stats = bytes.HasPrefix(target, []byte("/_stats"))
	keep = len(proto) > 7 && proto[7] == '1'
	length, chunked := int64(0), false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, false, err
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
				return false, false, errRequest
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
		return stats, keep, discardChunked(br)
	}
	_, err = br.Discard(int(length))
	return stats, keep, err
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
