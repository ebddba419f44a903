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
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	var kvs [maxFastHeaders]keyValues
	h, n, ok := fastHead(req, &kvs)
	if !ok {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(h.uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(h.host)
	bw.WriteString("\r\n")
	if h.userAgent != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(h.userAgent)
		bw.WriteString("\r\n")
	}
	for _, kv := range kvs[:n] {
		for _, v := range kv.values {
			bw.WriteString(kv.key)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// maxFastHeaders is the most header fields (besides Host and
// User-Agent) a request written by writeRequest's own path may have.
const maxFastHeaders = 32

type keyValues struct {
	key    string
	values []string
}

// fastHeadLines is what writeRequest writes for a request, when it may
// write it itself, besides the header fields (in the array given to
// fastHead, which does not travel with these strings: it stays on
// writeRequest's stack).
type fastHeadLines struct {
	uri, host, userAgent string
}

// fastHead says whether writeRequest may write req itself, and if so
// what: buf[:n] are the fields of the header map to write, sorted by key
// as Write sorts them. These are the conditions under which (*http.Request).Write's output is
// exactly request line, Host, User-Agent (unless blank) and the header
// map's other fields sorted by key, each value trimmed, and nothing
// else (no Content-Length, Transfer-Encoding, Trailer or Connection:
// close, no body, no trace callback).
func fastHead(req *http.Request, buf *[maxFastHeaders]keyValues) (h fastHeadLines, n int, ok bool) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return h, 0, false // Write may add Content-Length: 0
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 || len(req.TransferEncoding) > 0 ||
		len(req.Trailer) > 0 || req.Close || req.URL == nil || req.URL.Opaque != "" {
		return h, 0, false
	}
	if t := httptrace.ContextClientTrace(req.Context()); t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil) {
		return h, 0, false
	}
	h.host = req.Host
	if h.host == "" {
		h.host = req.URL.Host
	}
	// Write punycodes a non-ASCII host, blanks an invalid one and drops
	// an IPv6 zone: left to it.
	if !ascii(h.host) || !httpguts.ValidHostHeader(h.host) || strings.HasPrefix(h.host, "[") {
		return h, 0, false
	}
	h.uri = req.URL.RequestURI()
	if hasCTL(h.uri) {
		return h, 0, false // Write refuses it
	}
	h.userAgent = "Go-http-client/1.1" // Write's default
	if vs, ok := req.Header["User-Agent"]; ok {
		h.userAgent = ""
		if len(vs) > 0 {
			if hasNewline(vs[0]) {
				return h, 0, false
			}
			h.userAgent = textproto.TrimString(vs[0])
		}
	}
	for k, vs := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // not written from the map (reqWriteExcludeHeader)
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue // Write drops it
		}
		for _, v := range vs {
			if hasNewline(v) {
				return h, 0, false // Write turns them into spaces
			}
		}
		if n == len(buf) {
			return h, 0, false
		}
		buf[n] = keyValues{k, vs}
		n++
	}
	// Insertion sort: a few dozen keys at most, and no closure.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && buf[j].key < buf[j-1].key; j-- {
			buf[j], buf[j-1] = buf[j-1], buf[j]
		}
	}
	return h, n, true
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// hasNewline reports whether s holds a CR or LF, which Write turns into
// spaces.
func hasNewline(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b == '\r' || b == '\n' {
			return true
		}
	}
	return false
}

// hasCTL is net/http's test for a request target it will not write.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}
