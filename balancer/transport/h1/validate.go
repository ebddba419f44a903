package h1

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The checks a request passes before anything of it is sent: RFC 9110
// tokens and field values, read eight bytes at a time where they can be.

// validate checks req before anything is sent and gathers its header
// map into hd (a zero head) for writeRequest, in one pass over the map.
func validate(req *http.Request, hd *head) error {
	if req.URL == nil {
		return errors.New("h1: nil Request.URL")
	}
	if req.Header == nil {
		return errors.New("h1: nil Request.Header")
	}
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return fmt.Errorf("h1: unsupported protocol scheme %q", s)
	}
	if req.URL.Host == "" {
		return errors.New("h1: no Host in request URL")
	}
	if req.Method != "" && !isToken(req.Method) {
		return &invalidRequestError{fmt.Errorf("h1: invalid method %q", req.Method)}
	}
	if err := gather(req.Header, hd); err != nil {
		return &invalidRequestError{err}
	}
	if len(req.Trailer) == 0 {
		return nil // (a range over an empty map is not free)
	}
	for k := range req.Trailer {
		if !isToken(k) {
			return &invalidRequestError{fmt.Errorf("h1: invalid trailer field name %q", k)}
		}
	}
	return nil
}

// ErrInvalidRequest is what the error of a request the Transport refused
// to send matches with errors.Is: its method, a field of its header or
// trailer, or its framing cannot be written as HTTP/1.1, by the
// Transport's own checks or by (*http.Request).Write's (a Trailer naming
// Content-Length, Transfer-Encoding or Trailer, say). Such a request was
// not sent: nothing of it reached the connection, or, when Write refused
// it after a buffer's worth of its head had gone out, the connection was
// closed under the part sent. Either way the upstream was asked nothing
// it could answer, and the request is the caller's to fix; it is not
// sent again on another connection.
var ErrInvalidRequest = errors.New("h1: invalid request, not sent")

// invalidRequestError is a refusal that matches ErrInvalidRequest; its
// text is the refusal's own.
type invalidRequestError struct{ err error }

func (e *invalidRequestError) Error() string        { return e.err.Error() }
func (e *invalidRequestError) Unwrap() error        { return e.err }
func (e *invalidRequestError) Is(target error) bool { return target == ErrInvalidRequest }

// gather checks the header map h and gathers it into hd (a zero head),
// for writeRequest: validate's one pass over the map. The error is that
// of the first field in the map's order with an invalid name or, failing
// that, an invalid value.
func gather(h http.Header, hd *head) error {
	for k, vv := range h {
		if !isToken(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		vbytes := 0
		for _, v := range vv {
			if !validHeaderValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
			vbytes += len(v)
		}
		hd.add(k, vv, vbytes)
	}
	return nil
}

// isToken says whether s is a non-empty RFC 9110 token. Strings of eight
// bytes or more are read eight bytes at a time while those are letters,
// digits and '-' (as most field names are), the last eight overlapping
// the eight before them; from the first eight that are not, byte by byte.
func isToken(s string) bool {
	n := len(s)
	if n < 8 {
		return n > 0 && tokenBytes(s)
	}
	for i := 0; i < n-8; i += 8 {
		if !alnumDash(word(s, i)) {
			return tokenBytes(s[i:])
		}
	}
	return alnumDash(word(s, n-8)) || tokenBytes(s[n-8:])
}

// tokenBytes says whether every byte of s is a tchar.
func tokenBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenTable[s[i]] {
			return false
		}
	}
	return true
}

// tokenTable says which bytes are RFC 9110 tchars.
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validHeaderValue rejects control characters other than horizontal tab,
// as http.Transport does. Values of eight bytes or more are read eight
// bytes at a time (the last eight overlapping the eight before them)
// while none is below 0x20 or 0x7f (DEL); from the first eight that
// hold one (a tab, say), byte by byte.
func validHeaderValue(v string) bool {
	n := len(v)
	if n < 8 {
		return !controlBytes(v)
	}
	for i := 0; i < n-8; i += 8 {
		if controlOrDEL(word(v, i)) {
			return !controlBytes(v[i:])
		}
	}
	return !controlOrDEL(word(v, n-8)) || !controlBytes(v[n-8:])
}

// controlBytes says whether s holds a byte below 0x20 other than tab, or
// 0x7f.
func controlBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return true
		}
	}
	return false
}

// Eight bytes in a uint64: each byte times ones, and the high bit of each.
const ones, highs = 0x0101010101010101, 0x8080808080808080

// word is s[i:i+8], the first byte lowest (one load where the CPU allows
// unaligned loads).
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// controlOrDEL says whether a byte of x is below 0x20 or is 0x7f.
//
// (x-n*ones)&^x&highs, for n <= 0x80, is zero if and only if no byte of
// x is below n: with none below n no byte borrows, and each b-n has its
// high bit clear where b has it clear; the lowest byte below n wraps and
// has it set, its b clear. A byte 0x7f is a zero byte of x^(0x7f*ones),
// below 1.
func controlOrDEL(x uint64) bool {
	d := x ^ 0x7f*ones
	return ((x-0x20*ones)&^x|(d-ones)&^d)&highs != 0
}

// alnumDash says whether every byte of x is an ASCII letter, digit or
// '-'. With every byte below 0x80, b+k (k < 0x80) carries into no other
// byte, and its high bit says b >= 0x80-k: each range test is two such
// sums, per byte.
func alnumDash(x uint64) bool {
	if x&highs != 0 {
		return false
	}
	l := x | 0x20*ones // a letter's lower case
	alpha := (l + (0x80-'a')*ones) &^ (l + (0x7f-'z')*ones)
	digit := (x + (0x80-'0')*ones) &^ (x + (0x7f-'9')*ones)
	dash := ^((x ^ '-'*ones) + 0x7f*ones) // high bit set where b^'-' is 0
	return (alpha|digit|dash)&highs == highs
}

// hasToken says whether the comma-separated header value v holds token
// (ASCII case-insensitive).
func hasToken(v, token string) bool {
	for v != "" {
		var part string
		part, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}
