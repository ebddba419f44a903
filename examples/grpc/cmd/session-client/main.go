// Command session-client calls the session example service, directly or
// through ringlb, and prints which server answered each call:
//
//	session-client -addr 127.0.0.1:8080 -session alice -calls 3 -stream 5
//
// Without -ca it speaks cleartext HTTP/2 (ringlb with h2c: true); with -ca
// it speaks TLS, verifying the server against that PEM file (ringlb with
// tls).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlb/ringlb/examples/grpc/session"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port of ringlb (or of a server)")
	key := flag.String("session", "alice", "session, sent as x-session metadata")
	calls := flag.Int("calls", 3, "unary calls to make")
	stream := flag.Int("stream", 3, "messages to ask for on one server stream (0: no stream)")
	interval := flag.Duration("interval", 100*time.Millisecond, "time between stream messages")
	caFile := flag.String("ca", "", "PEM roots: use TLS and verify the server against them")
	serverName := flag.String("server-name", "", "with -ca: the name to verify (default: the host of -addr)")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the whole run")
	flag.Parse()

	creds := insecure.NewCredentials()
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			log.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			log.Fatalf("%s: no PEM certificate in it", *caFile)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: *serverName})
	}
	cc, err := grpc.NewClient("passthrough:///"+*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	c := session.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	failed := false
	for i := 0; i < *calls; i++ {
		h, err := c.Hit(ctx, *key)
		if err != nil {
			fmt.Printf("hit %d: %v\n", i+1, err)
			failed = true
			continue
		}
		fmt.Printf("hit %d: server %s, session %s, count %d\n", i+1, h.Server, h.Session, h.Count)
	}
	if *stream > 0 {
		n := 0
		err := c.Watch(ctx, *key, &session.WatchRequest{Count: *stream, Interval: *interval}, func(h *session.Hit) {
			n++
			fmt.Printf("stream %d: server %s, session %s, count %d\n", n, h.Server, h.Session, h.Count)
		})
		if err != nil {
			fmt.Printf("stream: %v\n", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
