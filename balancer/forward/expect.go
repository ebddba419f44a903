package forward

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// ExpectsContinue reports whether the server took r for one that
// expects 100-continue, and so sent 100 Continue when the body was first
// read: as net/http decides it, the token 100-continue in any case, among
// others, in the first Expect line (HTTP/1.1: "100-Continue, foo" is one)
// or in any of them (HTTP/2).
func ExpectsContinue(r *http.Request) bool {
	vs := r.Header["Expect"]
	if r.ProtoMajor >= 2 {
		return httpguts.HeaderValuesContainsToken(vs, "100-continue")
	}
	return len(vs) > 0 && hasToken(vs[0], "100-continue")
}

// hasToken is net/http's: whether token (lower case) is in v, in any
// case, between spaces, tabs, commas or v's ends.
func hasToken(v, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
