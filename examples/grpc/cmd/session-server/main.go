// Command session-server serves the session example service over
// cleartext HTTP/2 (h2c), the way gRPC servers run behind a proxy:
//
//	session-server -listen 127.0.0.1:50051 -name grpc-1
//	session-server -listen 127.0.0.1:50052 -name grpc-2 -unavailable
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/ringlb/ringlb/examples/grpc/session"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:50051", "address to serve on")
	name := flag.String("name", "", "name reported in every answer (default: the listen address)")
	unavailable := flag.Bool("unavailable", false, "answer every call with UNAVAILABLE (14)")
	flag.Parse()
	if *name == "" {
		*name = *listen
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&session.ServiceDesc, &session.Server{Name: *name, Unavailable: *unavailable})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	fmt.Printf("%s serving on %s (unavailable=%v)\n", *name, ln.Addr(), *unavailable)
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
