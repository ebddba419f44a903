package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/ringlb/ringlb/balancer/transport/h1"
)

// A request that an upstream transport (or ReverseProxy) refuses before
// anything of it was sent, for what the client put in it, is the
// client's (rule 13): it is answered 400 (501 for an upgrade no HTTP/2
// upstream can make, 431 for a head larger than the upstream takes),
// never counted against the upstream's breaker and never retried
// elsewhere (another upstream would refuse it too, or serve the key away
// from its owner). Every such refusal reaches ServeHTTP as an error that
// Refusal recognises: h1.Transport marks its own (h1.ErrInvalidRequest);
// net/http's HTTP/2 transport gives plain errors, which h2Transport
// recognises by checking the refused request as that transport does
// (h2Refusal); ReverseProxy's refusal of an unprintable upgrade protocol
// is recognised in downstream.RecordError. The checks run only once an
// attempt has failed, so a request that goes through pays nothing for
// them.
//
// What can be checked before any upstream is chosen is: an HTTP/2
// request's :method and :authority (checkH2Head), which net/http's
// HTTP/1.1 server checks itself but its HTTP/2 server lets through, and
// trailer fields no upstream may be sent, which are dropped
// (dropBadTrailers).

// refusedError is a request refused before anything of it was sent
// upstream, for what the client sent: answered code with msg.
type refusedError struct {
	code int
	msg  string
	err  error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// notSentMsg answers a request h1.Transport refused.
const notSentMsg = "bad request: the request cannot be forwarded: its method, a header or trailer field, or its framing is not valid\n"

// Refusal says whether err is a refused request (see refusedError), and
// how the client is answered.
func Refusal(err error) (code int, msg string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	var re *refusedError
	if errors.As(err, &re) {
		return re.code, re.msg, true
	}
	if errors.Is(err, h1.ErrInvalidRequest) {
		return http.StatusBadRequest, notSentMsg, true
	}
	return 0, "", false
}

func Refused(err error) bool {
	_, _, ok := Refusal(err)
	return ok
}

// CheckH2Head returns the 400 answer for an HTTP/2 request whose :method
// is not a token or whose :authority (or Host) is not a valid Host, as
// net/http's HTTP/1.1 server refuses such a request line and Host
// header; "" for any other request. The upstream transports refuse
// them (net/http's HTTP/2 one, and h1.Transport a method), or worse
// ((*http.Request).Write sends an empty Host in place of an invalid
// one). A byte-table lookup per byte, no allocation.
func CheckH2Head(r *http.Request) string {
	if r.ProtoMajor < 2 {
		return ""
	}
	if !httpguts.ValidHeaderFieldName(r.Method) { // a token
		return "bad request: invalid method\n"
	}
	if !httpguts.ValidHostHeader(r.Host) {
		return "bad request: invalid :authority (host)\n"
	}
	return ""
}

// DropBadTrailers deletes from a request's trailer map the fields that
// must not be forwarded: the names net/http forbids in a trailer
// (httpguts.ValidTrailerHeader: Content-Length, Transfer-Encoding,
// Trailer, Host, Authorization, Content-Type, If-* and the others) and
// fields whose name or a value the transports would refuse to write.
// (*http.Request).Write refuses a request whose trailer names the first
// three, and an HTTP/2 server resets a stream whose trailers hold any of
// them; net/http's HTTP/1.1 server merges whatever a chunked body's
// trailer holds into Request.Trailer, so a client can put them there.
func DropBadTrailers(h http.Header) {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidTrailerHeader(k) || !validValues(vv) {
			delete(h, k)
		}
	}
}

func validValues(vv []string) bool {
	for _, v := range vv {
		if !httpguts.ValidHeaderFieldValue(v) {
			return false
		}
	}
	return true
}

// BadUpgrade is ReverseProxy's refusal of a request asking to upgrade to
// a protocol whose name is not printable ASCII, which it answers through
// its ErrorHandler before calling the transport; downstream.RecordError
// knows it by the request.
func BadUpgrade(r *http.Request, err error) error {
	if up := UpgradeType(r.Header); up != "" && !printable(up) {
		return &refusedError{code: http.StatusBadRequest, msg: "bad request: the Upgrade header names an invalid protocol\n", err: err}
	}
	return err
}

// h2Transport is net/http's Transport for an HTTP/2 protocol (h2c or
// h2), whose refusals of a request it marks as refusedError. It refuses
// two kinds of request itself, before anything is dialled, so that they
// are refused whatever the state of the connection pool: an upgrade,
// which net/http refuses, except a WebSocket over TLS, which it sends
// over HTTP/1.1, a protocol the upstream was not declared to speak (one
// that speaks h2 alone fails the TLS handshake, and that would be
// counted against it); and a method that is not a token, which net/http
// refuses unless a pooled TLS connection takes the request (it checks
// the method after offering the request to its pooled HTTP/2
// connections, which do not).
type h2Transport struct{ *http.Transport }

// errUpgradeH2 is the error of an upgrade towards an HTTP/2 upstream.
var errUpgradeH2 = errors.New("an upgrade (Upgrade header) cannot be sent to an HTTP/2 upstream")

func (t h2Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if vv := req.Header["Upgrade"]; len(vv) > 0 && vv[0] != "" {
		closeRequestBody(req)
		return nil, &refusedError{code: http.StatusNotImplemented, msg: h2UpgradeMsg, err: errUpgradeH2}
	}
	if req.Method != "" && !httpguts.ValidHeaderFieldName(req.Method) {
		closeRequestBody(req)
		return nil, &refusedError{code: http.StatusBadRequest, msg: h2InvalidMsg, err: fmt.Errorf("invalid method %q", req.Method)}
	}
	res, err := t.Transport.RoundTrip(req)
	if err != nil {
		return nil, h2Refusal(req, err)
	}
	return res, nil
}

// Answers to requests net/http's HTTP/2 transport refuses.
const (
	h2UpgradeMsg   = "not implemented: upgrades (WebSocket, h2c) need an http1 upstream; this key's upstream speaks HTTP/2\n"
	h2HeadSizeMsg  = "request header fields too large for the upstream (its SETTINGS_MAX_HEADER_LIST_SIZE)\n"
	h2InvalidMsg   = "bad request: the request cannot be forwarded over HTTP/2: its method, host, a header or trailer field is not valid\n"
	headerListSize = "request header list larger than peer's advertised limit"
)

// h2Refusal returns err, as a refusedError when it is net/http's HTTP/2
// transport refusing req before sending anything of it. That transport
// returns plain errors, so req is checked as it checks a request (its
// Transport.roundTrip, then the header encoding of its HTTP/2 client
// connection), in that order: a request those checks refuse was refused.
// An error of the connection (a dial, a TLS handshake, a timeout) is not
// a refusal: a dial comes before the encoding's checks. The one refusal
// that depends on the upstream is a header list larger than its
// SETTINGS_MAX_HEADER_LIST_SIZE, which x/net reports with an error of
// its own that no type names: it is known by its text.
func h2Refusal(req *http.Request, err error) error {
	if CauseOf(err) != CauseBadResponse {
		return err // the connection's (or the client left)
	}
	bad := func(code int, msg string) error { return &refusedError{code: code, msg: msg, err: err} }
	// Transport.roundTrip: header and trailer fields (the method was
	// checked in RoundTrip).
	if !validFields(req.Header) || !validFields(req.Trailer) {
		return bad(http.StatusBadRequest, h2InvalidMsg)
	}
	// The header encoding: connection-specific fields first (an Upgrade
	// does not get this far).
	if vv := req.Header["Transfer-Encoding"]; len(vv) > 1 || len(vv) == 1 && vv[0] != "" && vv[0] != "chunked" {
		return bad(http.StatusBadRequest, h2InvalidMsg)
	}
	if vv := req.Header["Connection"]; len(vv) > 1 || len(vv) == 1 && vv[0] != "" && !strings.EqualFold(vv[0], "close") && !strings.EqualFold(vv[0], "keep-alive") {
		return bad(http.StatusBadRequest, h2InvalidMsg)
	}
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	if h, perr := httpguts.PunycodeHostPort(host); perr != nil || !httpguts.ValidHostHeader(h) {
		return bad(http.StatusBadRequest, h2InvalidMsg)
	}
	if req.Method != http.MethodConnect && req.URL != nil && !pseudoPath(req.URL.RequestURI()) &&
		!pseudoPath(strings.TrimPrefix(req.URL.RequestURI(), req.URL.Scheme+"://"+host)) {
		return bad(http.StatusBadRequest, h2InvalidMsg)
	}
	for k := range req.Trailer {
		switch http.CanonicalHeaderKey(k) {
		case "Transfer-Encoding", "Trailer", "Content-Length":
			return bad(http.StatusBadRequest, h2InvalidMsg)
		}
	}
	inner := err
	for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
		inner = u
	}
	if inner.Error() == headerListSize {
		return bad(http.StatusRequestHeaderFieldsTooLarge, h2HeadSizeMsg)
	}
	return err
}

// closeRequestBody closes a request's body, as a RoundTripper does with
// a request it refuses.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// pseudoPath says whether p may be an HTTP/2 :path.
func pseudoPath(p string) bool { return strings.HasPrefix(p, "/") || p == "*" }

// validFields says whether every field of h has a valid name and valid
// values, as net/http's Transport checks a request's header and trailer.
func validFields(h http.Header) bool {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || !validValues(vv) {
			return false
		}
	}
	return true
}
