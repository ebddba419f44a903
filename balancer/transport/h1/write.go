package h1

import (
	"bufio"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes a bodiless request to bw, byte for byte as
// (*http.Request).Write would. The common case (a GET or HEAD with no
// body, few enough headers, nothing in them that Write would rewrite or
// refuse, and no trace hook that wants to see the head) is written
// directly: Write's fmt calls, its header sorter from a sync.Pool and
// its newline replacer on every value cost a proxied request about as
// much as the rest of the head's writing. Anything else goes to Write.
//
// hd is what validate gathered from req's header map, which validate
// passed: every field name a token, no value with a control byte other
// than tab (so none with a CR or LF, which Write would turn into
// spaces). writeRequest does not look at the map again.
func writeRequest(bw *bufio.Writer, req *http.Request, hd *head) error {
	h, ok := fastHead(req, hd)
	if !ok {
		return req.Write(bw)
	}
	// The head is appended to the buffer's free space (all of a fresh
	// buffer, normally) and written with one Write. One larger than that
	// (a few KiB of cookies, say) is left to Write too.
	if n := len(req.Method) + len(h.path) + len(h.query) + len(h.host) + len(h.userAgent) + hd.size +
		len(" ? HTTP/1.1\r\nHost: \r\nUser-Agent: \r\n\r\n"); n > bw.Available() {
		return req.Write(bw)
	}
	b := bw.AvailableBuffer()
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, h.path...)
	if h.hasQuery {
		b = append(b, '?')
		b = append(b, h.query...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, h.host...)
	b = append(b, '\r', '\n')
	if h.userAgent != "" {
		b = append(b, "User-Agent: "...)
		b = append(b, h.userAgent...)
		b = append(b, '\r', '\n')
	}
	for _, kv := range hd.kvs[:hd.n] {
		for _, v := range kv.values {
			b = append(b, kv.key...)
			b = append(b, ':', ' ')
			b = append(b, textproto.TrimString(v)...)
			b = append(b, '\r', '\n')
		}
	}
	b = append(b, '\r', '\n')
	_, err := bw.Write(b)
	return err
}

// maxFastHeaders is the most header fields (besides Host and
// User-Agent) a request written by writeRequest's own path may have.
const maxFastHeaders = 32

type keyValues struct {
	key    string
	values []string
}

// head is what validate gathers from a request's header map, in the
// pass that checks it, for writeRequest: the fields Write would write
// from the map (all but Host, User-Agent, Content-Length,
// Transfer-Encoding and Trailer: reqWriteExcludeHeader), in the map's
// order until writeRequest sorts them, User-Agent, and Connection for
// roundTrip. It lives on RoundTrip's stack.
type head struct {
	// n counts the fields to write; past len(kvs) only the first
	// len(kvs) are in kvs, and writeRequest leaves the request to Write.
	n int
	// size bounds the bytes of those fields' lines: key, ": ", value
	// and CRLF for each value.
	size   int
	sorted bool // kvs[:n] is sorted by key
	hasUA  bool // the map has User-Agent, whose values are ua
	ua     []string
	// connection is the first value of Connection, as
	// Header.Get("Connection") is (without its canonicalisation of the
	// key, which costs more than the rest of the lookup).
	connection string
	kvs        [maxFastHeaders]keyValues
}

// add notes the field k with values vv, whose values' bytes are vbytes.
func (hd *head) add(k string, vv []string, vbytes int) {
	switch k {
	case "User-Agent":
		hd.ua, hd.hasUA = vv, true
		return
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return // not written from the map (reqWriteExcludeHeader)
	case "Connection":
		if len(vv) > 0 {
			hd.connection = vv[0]
		}
	}
	if hd.n < len(hd.kvs) {
		hd.kvs[hd.n] = keyValues{k, vv}
		hd.size += len(vv)*(len(k)+len(": \r\n")) + vbytes
	}
	hd.n++
}

// fastHeadLines is what writeRequest writes for a request, when it may
// write it itself, besides the header fields (in hd.kvs). The request
// target is path, then "?" and query if hasQuery, as URL.RequestURI
// joins them (which allocates the join).
type fastHeadLines struct {
	path, query, host, userAgent string
	hasQuery                     bool
}

// fastHead says whether writeRequest may write req, whose header map
// validate gathered into hd, itself, and if so what: hd.kvs[:hd.n] are
// the fields of the header map to write, which fastHead sorts by key as
// Write sorts them. These are the conditions under which
// (*http.Request).Write's output is exactly request line, Host,
// User-Agent (unless blank) and the header map's other fields sorted by
// key, each value trimmed, and nothing else (no Content-Length,
// Transfer-Encoding, Trailer or Connection: close, no body, no trace
// callback).
func fastHead(req *http.Request, hd *head) (h fastHeadLines, ok bool) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return h, false // Write may add Content-Length: 0
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 || len(req.TransferEncoding) > 0 ||
		len(req.Trailer) > 0 || req.Close || req.URL == nil || req.URL.Opaque != "" || hd.n > len(hd.kvs) {
		return h, false
	}
	if t := httptrace.ContextClientTrace(req.Context()); t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil) {
		return h, false
	}
	h.host = req.Host
	if h.host == "" {
		h.host = req.URL.Host
	}
	// Write punycodes a non-ASCII host, blanks an invalid one and drops
	// an IPv6 zone: left to it. (ValidHostHeader refuses every byte
	// above 0x7f.)
	if !httpguts.ValidHostHeader(h.host) || strings.HasPrefix(h.host, "[") {
		return h, false
	}
	// RequestURI, for a URL with no Opaque, in pieces.
	h.path = req.URL.EscapedPath()
	if h.path == "" {
		h.path = "/"
	}
	h.query, h.hasQuery = req.URL.RawQuery, req.URL.ForceQuery || req.URL.RawQuery != ""
	if hasCTL(h.path) || hasCTL(h.query) {
		return h, false // Write refuses it
	}
	h.userAgent = "Go-http-client/1.1" // Write's default
	if hd.hasUA {
		h.userAgent = ""
		if len(hd.ua) > 0 {
			h.userAgent = textproto.TrimString(hd.ua[0])
		}
	}
	if !hd.sorted {
		// Insertion sort: a few dozen keys at most, and no closure.
		kvs := hd.kvs[:hd.n]
		for i := 1; i < len(kvs); i++ {
			for j := i; j > 0 && kvs[j].key < kvs[j-1].key; j-- {
				kvs[j], kvs[j-1] = kvs[j-1], kvs[j]
			}
		}
		hd.sorted = true
	}
	return h, true
}

// hasCTL is net/http's test for a request target it will not write: a
// byte below 0x20 or 0x7f. Eight bytes at a time, the last eight
// overlapping the eight before them, in strings of eight or more.
func hasCTL(s string) bool {
	n := len(s)
	if n >= 8 {
		for i := 0; i < n-8; i += 8 {
			if controlOrDEL(word(s, i)) {
				return true
			}
		}
		return controlOrDEL(word(s, n-8))
	}
	for i := 0; i < n; i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}
