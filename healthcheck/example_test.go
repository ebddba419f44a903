package healthcheck_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/ringlb/ringlb/healthcheck"
)

func Example() {
	// An upstream whose health check fails.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	transitions := make(chan string, 1)
	opts := healthcheck.Options{Path: "/healthz", Interval: 10 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2}
	hc := healthcheck.New(opts, healthcheck.ReporterFunc(func(name string, up bool, reason string) {
		transitions <- fmt.Sprintf("%s up=%v: %s", name, up, reason)
	}), nil)
	hc.Update(opts, []healthcheck.Target{{Name: "app-1", URL: u}})

	up, known := hc.Healthy("app-1")
	fmt.Println("before the first probe: up", up, "known", known)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hc.Run(ctx); close(done) }()
	fmt.Println(<-transitions)
	cancel()
	<-done // every prober has stopped

	// Output:
	// before the first probe: up true known true
	// app-1 up=false: 2 consecutive failures: status 503, want 200-399
}
