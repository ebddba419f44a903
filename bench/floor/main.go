// Command floor is the cheapest hashing proxy that can be built from the
// parts ringlb is built from: net/http's server, httputil.ReverseProxy and
// ringlb's HTTP/1.1 transport (balancer/transport/h1), or net/http's Transport with
// -transport std. It picks the upstream by xxhash64 of the request URI
// modulo the number of upstreams and does nothing else: no ring, no
// bounded loads, no breakers, no metrics, no forwarding headers beyond
// ReverseProxy's own. What ringlb does to be cheap that is not routing is
// done here too: 32 KiB copy buffers come from a pool and the GC target is
// 150, as ringlb's, unless GOGC is set.
//
// bench/run.sh measures it beside ringlb (TARGETS=floor) so that the CPU
// per request of ringlb can be split into what these parts cost anyway and
// what ringlb adds on top.
//
// With -tls-cert and -tls-key it serves TLS, offering HTTP/2 by ALPN
// (net/http's own HTTP/2 server, at its defaults) beside HTTP/1.1: the
// floor of bench/run.sh's HTTP/2 row (H2=1). The upstreams stay HTTP/1.1
// through the same transport.
//
//	go run ./bench/floor -listen 127.0.0.1:19090 http://127.0.0.1:19001 http://127.0.0.1:19002
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlb/ringlb/balancer/transport/h1"
)

// buffers lends ReverseProxy its copy buffers.
type buffers struct{ sync.Pool }

func (b *buffers) Get() []byte {
	if p, ok := b.Pool.Get().(*[32 << 10]byte); ok {
		return p[:]
	}
	return make([]byte, 32<<10)
}

func (b *buffers) Put(p []byte) {
	if len(p) == 32<<10 {
		b.Pool.Put((*[32 << 10]byte)(p))
	}
}

func main() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(150)
	}
	listen := flag.String("listen", "127.0.0.1:19090", "address to listen on")
	transport := flag.String("transport", "h1", "upstream transport: h1 (balancer/transport/h1) or std (net/http)")
	pprofAddr := flag.String("pprof", "", "if set, serve net/http/pprof on this address")
	server := flag.String("server", "std", "server under ReverseProxy: std (net/http) or lean (a measurement only: see lean.go)")
	certFile := flag.String("tls-cert", "", "with -tls-key: serve TLS with HTTP/2 and HTTP/1.1 (ALPN), this PEM certificate")
	keyFile := flag.String("tls-key", "", "with -tls-cert: its PEM private key")
	flag.Parse()
	ups := upstreams(flag.Args())
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(ups[xxhash.Sum64String(pr.In.RequestURI)%uint64(len(ups))])
			pr.Out.Host = pr.In.Host
		},
		Transport:  newTransport(*transport),
		BufferPool: &buffers{},
		ErrorLog:   log.New(io.Discard, "", 0),
	}
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }() // the default mux has net/http/pprof
	}
	if *certFile != "" && *server != "std" {
		fmt.Fprintln(os.Stderr, "floor: -tls-cert needs -server std")
		os.Exit(2)
	}
	if *server == "lean" {
		ln, err := net.Listen("tcp", *listen)
		if err == nil {
			err = serveLean(ln, proxy)
		}
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	} else if *server != "std" {
		fmt.Fprintf(os.Stderr, "floor: -server must be std or lean, got %q\n", *server)
		os.Exit(2)
	}
	serveStd(proxy, *listen, *certFile, *keyFile)
}

// upstreams parses the upstream URLs of the command line; none, or a bad
// one, exits.
func upstreams(args []string) []*url.URL {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "floor: give one or more upstream URLs")
		os.Exit(2)
	}
	var ups []*url.URL
	for _, a := range args {
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "floor: bad upstream URL %q\n", a)
			os.Exit(2)
		}
		ups = append(ups, u)
	}
	return ups
}

// newTransport returns the upstream transport -transport names; another
// name exits.
func newTransport(name string) http.RoundTripper {
	switch name {
	case "h1":
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		return &h1.Transport{
			Dial:                  d.DialContext,
			DialTimeout:           5 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConns:          16384,
			MaxIdleConnsPerHost:   1024,
		}
	case "std":
		return &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConns:          16384,
			MaxIdleConnsPerHost:   1024,
			DisableCompression:    true,
		}
	}
	fmt.Fprintf(os.Stderr, "floor: -transport must be h1 or std, got %q\n", name)
	os.Exit(2)
	return nil
}

// serveStd serves proxy on listen with net/http's server, over TLS (and
// HTTP/2) when given certFile and keyFile; it returns only by exiting.
func serveStd(proxy http.Handler, listen, certFile, keyFile string) {
	srv := &http.Server{
		Addr:              listen,
		Handler:           proxy,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	var err error
	switch {
	case certFile != "" && keyFile != "":
		err = srv.ListenAndServeTLS(certFile, keyFile) // net/http enables HTTP/2 by ALPN
	case certFile != "" || keyFile != "":
		fmt.Fprintln(os.Stderr, "floor: give both -tls-cert and -tls-key")
		os.Exit(2)
	default:
		err = srv.ListenAndServe()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
