// Command upstream runs one stateful demo upstream: it answers
// "user U: visit N on NAME" and keeps the visit counts in memory.
//
//	go run ./examples/upstream -name app-1 -listen 127.0.0.1:9001
//
// With -handoff HEADER (ringlb's handoff.header), a request that carries
// the header takes its user's visit count from the upstream it names
// before counting on.
//
// POST /_demo/fail?health=1 (or ?requests=1) makes it fail; POST
// /_demo/recover heals it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/demo"
)

func main() {
	name := flag.String("name", "app-1", "the name it answers with")
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	failHealth := flag.Bool("fail-health", false, "start failing the health check")
	failRequests := flag.Bool("fail-requests", false, "start answering requests with 503")
	handoff := flag.String("handoff", "", "the handoff header: fetch a user's count from the upstream it names")
	flag.Parse()

	u := demo.New(*name)
	if *handoff != "" {
		u.SetHandoff(*handoff)
	}
	u.FailHealth(*failHealth)
	u.FailRequests(*failRequests)
	srv := &http.Server{Addr: *listen, Handler: u, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	slog.Info("demo upstream listening", "name", *name, "listen", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "upstream %s: %v\n", *name, err)
		os.Exit(1)
	}
}
