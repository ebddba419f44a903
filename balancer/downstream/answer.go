package downstream

import (
	"io"
	"net/http"

	"github.com/ringlb/ringlb/balancer/transport"
)

// PlainError answers code with msg as a plain-text body.
func PlainError(w http.ResponseWriter, code int, msg string) {
	hdr := w.Header()
	hdr.Del("Content-Length")
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// RecordError is every ReverseProxy's ErrorHandler: it writes nothing and
// leaves the error in the Writer (Err) for ServeHTTP, which retries or
// answers. ReverseProxy's own refusal of what the client asked for
// (transport.BadUpgrade) is marked here.
func RecordError(w http.ResponseWriter, r *http.Request, err error) {
	if rw, ok := w.(*Writer); ok {
		rw.Err = transport.BadUpgrade(r, err)
		return
	}
	w.WriteHeader(http.StatusBadGateway)
}
