package process

import "net/http"

// headerSlack is what net/http reads beyond http.Server.MaxHeaderBytes
// before it answers 431 (its buffered reader's look-ahead).
const headerSlack = 4096

// serverHeaderLimit is the http.Server.MaxHeaderBytes that makes request
// heads (request line and headers) larger than limit get 431, as
// max_header_bytes promises, rather than limit plus net/http's slack.
func serverHeaderLimit(limit int) int {
	return max(limit-headerSlack, 1)
}

// limitHeaders answers 431 to request heads larger than limit that the
// server let through: only possible when limit is at most the slack, since
// the server's own limit cannot go below it.
func limitHeaders(h http.Handler, limit int) http.Handler {
	if limit > headerSlack {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headSize(r) > limit {
			w.Header().Set("Connection", "close")
			http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headSize approximates the bytes of a request's head as sent: the request
// line and every header line with its CRLF.
func headSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if r.Host != "" { // net/http moves Host out of the header map
		n += len("Host: ") + len(r.Host) + 2
	}
	return n + 2
}
