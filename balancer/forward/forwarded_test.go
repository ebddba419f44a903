package forward

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"reflect"
	"testing"
)

// TestSetForwardedMatchesSetXForwarded: SetForwarded leaves the outbound
// header exactly as the Rewrite it replaced did (copy the client's
// X-Forwarded-For back, SetXForwarded, then ReverseProxy's empty
// User-Agent), for every mix of prior X-Forwarded-For, RemoteAddr, TLS
// and User-Agent.
func TestSetForwardedMatchesSetXForwarded(t *testing.T) {
	for _, remote := range []string{"192.0.2.1:5555", "[2001:db8::1]:443", "no-port", ""} {
		for _, xff := range [][]string{nil, {}, {"198.51.100.1"}, {"198.51.100.1", "198.51.100.2, 198.51.100.3"}} {
			for _, ua := range [][]string{nil, {"curl/8"}, {""}} {
				for _, tlsOn := range []bool{false, true} {
					in := &http.Request{RemoteAddr: remote, Host: "shop.example:8080", Header: http.Header{"Accept": {"*/*"}}}
					if xff != nil {
						in.Header["X-Forwarded-For"] = xff
					}
					if ua != nil {
						in.Header["User-Agent"] = ua
					}
					if tlsOn {
						in.TLS = &tls.ConnectionState{}
					}
					// What ReverseProxy hands Rewrite: a clone without
					// the client's forwarding headers.
					outHeader := func() http.Header {
						h := in.Header.Clone()
						for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
							delete(h, k)
						}
						return h
					}
					want := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: outHeader()}}
					if v := in.Header["X-Forwarded-For"]; v != nil {
						want.Out.Header["X-Forwarded-For"] = v
					}
					want.SetXForwarded()
					if _, ok := want.Out.Header["User-Agent"]; !ok {
						want.Out.Header.Set("User-Agent", "")
					}
					got := outHeader()
					SetForwarded(got, in)
					if !reflect.DeepEqual(got, want.Out.Header) {
						t.Errorf("RemoteAddr %q, X-Forwarded-For %q, User-Agent %q, TLS %v:\n got %q\nwant %q", remote, xff, ua, tlsOn, got, want.Out.Header)
					}
				}
			}
		}
	}
}
