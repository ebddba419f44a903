package testnet

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// RawExchange sends req (raw request bytes), then body if not nil, on a
// new connection to addr while reading everything the server sends until
// it closes the connection (within 20s), and returns that as
// CanonicalResponse renders it. A reset connection ends the read like a
// close; the write may fail, as it does when the server answers early.
func RawExchange(t testing.TB, addr, req string, body io.Reader) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, req)
		if err == nil && body != nil {
			_, err = io.Copy(conn, body)
		}
		wrote <- err
	}()
	raw, err := io.ReadAll(conn)
	if err != nil && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("reading the response: %v", err)
	}
	conn.Close()
	<-wrote
	method, _, _ := strings.Cut(req, " ")
	return CanonicalResponse(raw, method)
}

// CutResponse is what CanonicalResponse renders for no response at all:
// the connection was closed (or reset) before a byte came.
const CutResponse = "(nothing: the connection was cut)"

// CanonicalResponse renders raw response bytes (to a request with the
// given method) for comparison: every response (1xx included) as its
// status line and headers (Date aside) and, for the final one, its
// framing, decoded body, how it ended, and its trailers. Chunk boundaries
// are not compared: they follow the sizes of reads, which is timing.
// Bytes that do not parse are rendered as they are.
func CanonicalResponse(raw []byte, method string) string {
	if len(raw) == 0 {
		return CutResponse
	}
	var sb strings.Builder
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return fmt.Sprintf("%s(unparsed: %v)\n%q", sb.String(), err, raw)
		}
		fmt.Fprintf(&sb, "%s %s\n", res.Proto, res.Status)
		for _, k := range slices.Sorted(maps.Keys(res.Header)) {
			if k != "Date" {
				fmt.Fprintf(&sb, "%s: %q\n", k, res.Header[k])
			}
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != 101 {
			continue
		}
		body, err := io.ReadAll(res.Body)
		if res.StatusCode == 101 {
			body, err = io.ReadAll(br)
		}
		fmt.Fprintf(&sb, "content-length %d, transfer-encoding %q, close %v\n", res.ContentLength, res.TransferEncoding, res.Close)
		if len(body) > 256 {
			fmt.Fprintf(&sb, "body %d bytes sha256 %x err %v\n", len(body), sha256.Sum256(body), err)
		} else {
			fmt.Fprintf(&sb, "body %q err %v\n", body, err)
		}
		for _, k := range slices.Sorted(maps.Keys(res.Trailer)) {
			fmt.Fprintf(&sb, "trailer %s: %q\n", k, res.Trailer[k])
		}
		return sb.String()
	}
}

// EchoRequest answers with what the upstream saw of the request (request
// line, host, framing, headers, body and trailers), with two Set-Cookie
// headers and an X-Sum trailer, so that a differential test compares what
// each transport sent as well as what it brought back.
var EchoRequest = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s %s host=%s len=%d te=%q\n", r.Method, r.RequestURI, r.Proto, r.Host, r.ContentLength, r.TransferEncoding)
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		fmt.Fprintf(&sb, "%s: %q\n", k, r.Header[k])
	}
	b, err := io.ReadAll(r.Body)
	fmt.Fprintf(&sb, "body %d %q err=%v trailer=%v\n", len(b), b[:min(len(b), 64)], err, r.Trailer)
	w.Header().Add("Set-Cookie", "a=1")
	w.Header().Add("Set-Cookie", "b=2")
	w.Header().Set("Trailer", "X-Sum")
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, sb.String())
	w.Header().Set("X-Sum", fmt.Sprint(len(b)))
})
