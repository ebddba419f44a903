package h1

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// validateBefore is validate as it was before it gathered the header map
// for writeRequest in the same pass (and before its byte checks read
// eight bytes at a time): the reference for its errors.
func validateBefore(req *http.Request) error {
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
	if req.Method != "" && !isTokenBefore(req.Method) {
		return fmt.Errorf("h1: invalid method %q", req.Method)
	}
	for k, vv := range req.Header {
		if !isTokenBefore(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !validHeaderValueBefore(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
		}
	}
	for k := range req.Trailer {
		if !isTokenBefore(k) {
			return fmt.Errorf("h1: invalid trailer field name %q", k)
		}
	}
	return nil
}

func isTokenBefore(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || !strings.ContainsRune("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func validHeaderValueBefore(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// possibleErrors are the errors validateBefore can return for req, one
// for each field of the header map that could come first in the map's
// order among the bad ones (its name, or failing that one of its values).
func possibleErrors(req *http.Request) map[string]bool {
	m := map[string]bool{}
	if req.URL != nil && req.Header != nil && req.URL.Host != "" && (req.URL.Scheme == "http" || req.URL.Scheme == "https") &&
		(req.Method == "" || isTokenBefore(req.Method)) {
		for k, vv := range req.Header {
			if !isTokenBefore(k) {
				m[fmt.Sprintf("h1: invalid header field name %q", k)] = true
				continue
			}
			for _, v := range vv {
				if !validHeaderValueBefore(v) {
					m[fmt.Sprintf("h1: invalid header field value for %q", k)] = true
					break
				}
			}
		}
	}
	if len(m) == 0 {
		m[fmt.Sprint(validateBefore(req))] = true // no header field decides
	}
	return m
}

// TestValidateAsBefore: validate returns what it returned before it
// gathered the header map in the same pass, over requests mixing bad
// methods, schemes, hosts, field names, values and trailer names, several
// at once. Where more than one field is bad the map's order decides which
// error comes (before as now), so each request is validated many times
// both ways, and each error must be one of possibleErrors.
func TestValidateAsBefore(t *testing.T) {
	methods := []string{"GET", "", "HEAD", "GE T", "PÖST"}
	keys := []string{"X-Forwarded-For", "X-Request-Id", "User-Agent", "Host", "Content-Length", "Bad Name", "", "ü", "a:b", "x\x00", "X-Ok", "X-Longer-Than-Eight-Bytes", "X-Longer-Than-Eight-Bytes\x7f"}
	vals := []string{"v", "", "tab\t", "ü", "new\nline", "cr\rx", "\x00", "del\x7f", "0123456789abcdef0123456789abcdef", "0123456789abcdef\x01", "0123456\t89abcde\n", "\t\t\t\t\t\t\t\t"}
	r := rand.New(rand.NewSource(2))
	pick := func(s []string) string { return s[r.Intn(len(s))] }
	seen := map[int]int{} // requests by how many errors validate gave for each
	for i := range 3000 {
		req := &http.Request{Method: pick(methods), URL: &url.URL{Scheme: "http", Host: "app.example"}, Header: http.Header{}}
		switch r.Intn(20) {
		case 0:
			req.URL = nil
		case 1:
			req.Header = nil
		case 2:
			req.URL.Scheme = "ftp"
		case 3:
			req.URL.Host = ""
		case 4:
			req.Trailer = http.Header{pick(keys): nil}
		}
		if req.Header != nil {
			for range r.Intn(6) {
				k := pick(keys)
				for range r.Intn(3) {
					req.Header[k] = append(req.Header[k], pick(vals))
				}
			}
		}
		possible := possibleErrors(req)
		got := map[string]bool{}
		for range 20 {
			if err := fmt.Sprint(validateBefore(req)); !possible[err] {
				t.Fatalf("request %d (%q %v, header %q, trailer %q): validateBefore %v; possible: %v", i, req.Method, req.URL, req.Header, req.Trailer, err, possible)
			}
			var hd head
			err := fmt.Sprint(validate(req, &hd))
			if !possible[err] {
				t.Fatalf("request %d (%q %v, header %q, trailer %q): validate %v; possible: %v", i, req.Method, req.URL, req.Header, req.Trailer, err, possible)
			}
			got[err] = true
		}
		seen[len(got)]++
	}
	if seen[1] == 0 || seen[2] == 0 {
		t.Errorf("requests by the number of validate's errors for each: %v", seen)
	}
}

// TestByteChecks: isToken is the field name check of the old fast path
// (httpguts.ValidHeaderFieldName), and validHeaderValue and hasCTL, which
// read eight bytes at a time, are the byte-by-byte checks, for every byte
// at every position of strings up to 24 bytes long, the rest of them one
// byte repeated.
func TestByteChecks(t *testing.T) {
	if isToken("") || httpguts.ValidHeaderFieldName("") {
		t.Error("the empty string is a token")
	}
	for _, fill := range []byte{'a', 'Z', '0', '-', '~', '\t', 0x80, 0xff} {
		for n := 1; n <= 24; n++ {
			b := []byte(strings.Repeat(string(fill), n))
			for i := range n {
				for c := range 256 {
					b[i] = byte(c)
					s := string(b)
					if got, want := isToken(s), httpguts.ValidHeaderFieldName(s); got != want {
						t.Fatalf("isToken(%q) %v, httpguts %v", s, got, want)
					}
					if !sameByteChecks(t, s) {
						t.FailNow()
					}
				}
				b[i] = fill
			}
		}
	}
	// Every value validHeaderValue passes is one fastHead's newline
	// check passed (Write would rewrite a CR or LF).
	for c := range 256 {
		if s := "abcdefgh" + string(rune(c)); (c == '\r' || c == '\n') && validHeaderValue(s) {
			t.Errorf("validHeaderValue(%q) passes", s)
		}
	}
}

// FuzzByteChecks compares isToken, validHeaderValue and hasCTL with their byte
// by byte references.
func FuzzByteChecks(f *testing.F) {
	for _, s := range []string{"", "X-Forwarded-For", "0123456789abcdef\t", "a\x7fbcdefgh", "ünïcödé", "Bad Name!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { sameByteChecks(t, s) })
}

// sameByteChecks reports (and says whether none was found) where
// isToken, validHeaderValue and hasCTL differ on s from their byte by
// byte references.
func sameByteChecks(t *testing.T, s string) bool {
	t.Helper()
	ok := true
	if got, want := isToken(s), isTokenBefore(s); got != want {
		t.Errorf("isToken(%q) %v, byte by byte %v", s, got, want)
		ok = false
	}
	if got, want := validHeaderValue(s), validHeaderValueBefore(s); got != want {
		t.Errorf("validHeaderValue(%q) %v, byte by byte %v", s, got, want)
		ok = false
	}
	if got, want := hasCTL(s), strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }); got != want {
		t.Errorf("hasCTL(%q) %v, byte by byte %v", s, got, want)
		ok = false
	}
	return ok
}

// TestBadHeaderNothingSent: a request refused for its header map gets
// validate's error from RoundTrip, before any connection to the upstream
// is made: a field whose name and value are both bad is refused for its
// name; with a bad name in one field and a bad value in another, the
// error is one of the two.
func TestBadHeaderNothingSent(t *testing.T) {
	checkLeaks(t)
	u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {})
	tr := newTransport(t)
	for _, c := range []struct {
		header http.Header
		want   []string
	}{
		{http.Header{"Bad Name": {"a\r\nInjected: yes"}}, []string{`h1: invalid header field name "Bad Name"`}},
		{http.Header{"X-Ok": {"fine", "0123456789abcdef\r\nInjected: yes"}}, []string{`h1: invalid header field value for "X-Ok"`}},
		{http.Header{"Bad Name": {"v"}, "X-Ok": {"a\nb"}, "X-Fine": {"v"}}, []string{`h1: invalid header field name "Bad Name"`, `h1: invalid header field value for "X-Ok"`}},
	} {
		for range 10 {
			req, _ := http.NewRequest("GET", u.URL+"/", nil)
			req.Header = c.header
			_, err := tr.RoundTrip(req)
			if err == nil || !containsString(c.want, err.Error()) {
				t.Errorf("header %q: err %v, want one of %q", c.header, err, c.want)
			}
		}
	}
	if n := u.conns.Load(); n != 0 {
		t.Errorf("%d connections to the upstream", n)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
