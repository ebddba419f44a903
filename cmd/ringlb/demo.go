package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/demo"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, cfg, code, ok := loadCommand("demo", args, stdout, stderr)
	if !ok {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	// Start every upstream in-process, on loopback only.
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i, u := range cfg.Upstreams {
		addr, err := demoAddr(u)
		if err != nil {
			fmt.Fprintf(stderr, "%s: upstreams[%d].url: %v\n", path, i, err)
			return exitFail
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(stderr, "demo upstream %s: %v\n", u.Name, err)
			return exitFail
		}
		s := &http.Server{Handler: demo.New(u.Name), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, s)
		go s.Serve(l)
	}
	return serve(ctx, path, cfg, logger, func(proxy, admin net.Addr) {
		fmt.Fprint(stdout, demoIntro(cfg, proxy.String(), admin.String()))
	})
}

// demoAddr returns the loopback address a demo upstream listens on, or an
// error for a URL the demo must not bind.
func demoAddr(u config.Upstream) (string, error) {
	if u.URL.Scheme != "http" {
		return "", fmt.Errorf("the demo serves plain http only, got %s", u.URL)
	}
	host, port := u.URL.Hostname(), u.URL.Port()
	if port == "" {
		port = "80"
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("the demo starts upstreams on loopback addresses only, got %s", u.URL)
	}
	return net.JoinHostPort(host, port), nil
}

func demoIntro(cfg *config.Config, proxy, admin string) string {
	names := make([]string, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		names[i] = u.Name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nringlb demo: %d stateful upstreams (%s) behind the proxy at http://%s\n\n",
		len(names), strings.Join(names, ", "), proxy)
	fmt.Fprintf(&b, "Each user sticks to one upstream, whose visit counter keeps counting:\n")
	fmt.Fprintf(&b, "  for i in 1 2 3; do curl -s 'http://%s/?user=42'; done\n", proxy)
	fmt.Fprintf(&b, "  for u in 1 2 3 4 5 6 7 8; do curl -s -H \"X-User-ID: $u\" http://%s/; done\n", proxy)
	fmt.Fprintf(&b, "Where would a key go, and why:\n")
	fmt.Fprintf(&b, "  curl -s 'http://%s/debug/lookup?key=42'\n", admin)
	fmt.Fprintf(&b, "The ring, its upstreams and their state:\n")
	fmt.Fprintf(&b, "  curl -s http://%s/debug/ring    (status page: http://%s/)\n", admin, admin)
	if len(cfg.Upstreams) > 0 {
		u := cfg.Upstreams[0]
		fmt.Fprintf(&b, "Make %s fail its health check, then heal it:\n", u.Name)
		fmt.Fprintf(&b, "  curl -s -X POST '%s/_demo/fail?health=1'; curl -s -X POST %s/_demo/recover\n", u.URL, u.URL)
	}
	fmt.Fprintf(&b, "Press Ctrl-C to stop.\n\n")
	return b.String()
}
