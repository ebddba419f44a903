package balancer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
)

// grpcBackend is an h2c upstream answering like a gRPC server: HTTP 200,
// and its grpc-status either in the trailers after a message or, for a
// trailers-only response, in the headers.
type grpcBackend struct {
	srv         *httptest.Server
	status      atomic.Value // string: the grpc-status to answer
	trailerOnly atomic.Bool
	h2          atomic.Int32 // requests that arrived over HTTP/2
}

func newGRPCBackend(t *testing.T) *grpcBackend {
	be := &grpcBackend{}
	be.status.Store("0")
	be.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			be.h2.Add(1)
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		st := be.status.Load().(string)
		if be.trailerOnly.Load() {
			w.Header().Set("Grpc-Status", st)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Trailer", "Grpc-Status")
		io.WriteString(w, "\x00\x00\x00\x00\x02{}")
		w.Header().Set("Grpc-Status", st)
	}))
	be.srv.Config.Protocols = new(http.Protocols)
	be.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	be.srv.Start()
	t.Cleanup(be.srv.Close)
	return be
}

func TestGRPCStatusFeedsTheBreaker(t *testing.T) {
	for _, trailersOnly := range []bool{false, true} {
		name := "trailer"
		if trailersOnly {
			name = "trailers-only"
		}
		t.Run(name, func(t *testing.T) {
			be := newGRPCBackend(t)
			be.trailerOnly.Store(trailersOnly)
			opts := baseOptions([]options.Upstream{{Name: "g", URL: mustURL(t, be.srv.URL), Addr: "g", Weight: 1, Protocol: transport.H2C}})
			opts.Breaker = breaker.Options{ConsecutiveFailures: 2, FailureStatuses: []int{502}, FailureGRPCStatuses: []int{14}, OpenTimeout: time.Hour}
			b, _, front := proxy(t, opts)
			clk := newFakeClock()
			clk.install(b)
			call := func() string {
				t.Helper()
				res, err := front.Client().Post(front.URL+"/svc/M", "application/grpc", nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Fatalf("status %d; want 200 as the upstream answered", res.StatusCode)
				}
				if trailersOnly {
					return res.Header.Get("Grpc-Status")
				}
				return res.Trailer.Get("Grpc-Status")
			}
			// Statuses not listed are the application's answers.
			for _, st := range []string{"0", "5", "0", "13", "5"} {
				be.status.Store(st)
				if got := call(); got != st {
					t.Fatalf("the client got grpc-status %q; want %q passed through", got, st)
				}
			}
			if br := status(t, b, "g").Breaker; br != "closed" {
				t.Fatalf("after statuses 0, 5 and 13 the breaker is %s; want closed", br)
			}
			be.status.Store("14")
			call()
			if br := status(t, b, "g").Breaker; br != "closed" {
				t.Fatalf("after one UNAVAILABLE the breaker is %s; want closed (2 needed)", br)
			}
			call()
			if br := status(t, b, "g").Breaker; br != "open" {
				t.Fatalf("after two UNAVAILABLE in a row the breaker is %s; want open", br)
			}
			// The half-open trial is settled by the response head: a
			// trailers-only UNAVAILABLE fails it; with the status in the
			// trailer the head succeeded, and the trailer counts as one
			// failure of the closed breaker.
			clk.advance(time.Hour)
			call()
			want := "closed"
			if trailersOnly {
				want = "open"
			}
			if br := status(t, b, "g").Breaker; br != want {
				t.Fatalf("after an UNAVAILABLE trial the breaker is %s; want %s", br, want)
			}
			be.status.Store("0")
			clk.advance(time.Hour)
			call()
			if br := status(t, b, "g").Breaker; br != "closed" {
				t.Fatalf("after an OK call the breaker is %s; want closed", br)
			}
			if be.h2.Load() != 9 {
				t.Errorf("%d of 9 requests reached the h2c upstream over HTTP/2", be.h2.Load())
			}
		})
	}
}
