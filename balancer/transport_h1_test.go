package balancer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// The http1 transport speaks HTTP/1.1, trailers both ways, to cleartext
// and TLS upstreams, also to ones that offer HTTP/2.
func TestHTTP1TransportSpeaksHTTP1(t *testing.T) {
	ca := certstest.NewCA(t)
	leaf := ca.Issue(t, certstest.Options{})
	h2c := h2cUpstream(t, protoHandler(t))
	h2 := tlsUpstream(t, protoHandler(t), leaf, true)
	tr := transport.NewH1(transport.Options{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 5 * time.Second,
		IdleConnTimeout: time.Minute, TLS: transport.UpstreamTLS{RootCAs: ca.Pool()}})
	t.Cleanup(tr.CloseIdleConnections)
	for _, url := range []string{h2c.URL, h2.URL} {
		resp, err := roundTrip(t, tr, url)
		checkProto(t, resp, err, "HTTP/1.1")
	}
}

// https upstreams are verified as upstream_tls says.
func TestHTTP1TransportVerifiesUpstreams(t *testing.T) {
	srv, cases := verifyUpstream(t, false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := transport.NewH1(transport.Options{DialTimeout: 2 * time.Second, TLS: tc.tls})
			t.Cleanup(tr.CloseIdleConnections)
			resp, err := roundTrip(t, tr, srv.URL)
			switch {
			case tc.wantErr == "":
				checkProto(t, resp, err, "HTTP/1.1")
			case err == nil || !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// A refused connection is a *transport.DialError: nothing was sent, so the
// balancer may retry the request elsewhere whatever its method.
func TestHTTP1TransportMarksDialErrors(t *testing.T) {
	addr := testnet.RefusedAddr(t)
	tr := transport.NewH1(transport.Options{DialTimeout: 2 * time.Second})
	for _, url := range []string{"http://" + addr, "https://" + addr} {
		_, err := roundTrip(t, tr, url)
		var de *transport.DialError
		if !errors.As(err, &de) {
			t.Errorf("%s: err = %v, want a *transport.DialError", url, err)
		}
	}
}
