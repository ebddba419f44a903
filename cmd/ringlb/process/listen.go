package process

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/admin"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// Server limits a proxy user expects; not in the config file. Variables
// so tests can shorten them.
var (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
)

// listen binds the proxy and the admin addresses. On failure it binds
// nothing and returns the problem to log.
func listen(cfg *config.Config) (proxy, adm net.Listener, problem string) {
	pl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, nil, BindError("listen", cfg.Listen, err)
	}
	al, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		pl.Close()
		return nil, nil, BindError("admin_listen", cfg.AdminListen, err)
	}
	return pl, al, ""
}

// httpServers returns the proxy's and the admin listener's HTTP servers,
// bound at proxyAddr and adminAddr; the admin listener shows version.
func (s *server) httpServers(cfg *config.Config, version string, proxyAddr, adminAddr net.Addr) (proxySrv, adminSrv *http.Server) {
	s.mu.Lock()
	s.proxyAddr = proxyAddr.String()
	s.warnDiscoveredLoopsLocked() // members found before the port was known
	s.mu.Unlock()
	errLog := log.New(&slogWriter{s.log}, "", 0)
	proxySrv = &http.Server{
		Handler:           limitHeaders(s.rt, cfg.MaxHeaderBytes),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverHeaderLimit(cfg.MaxHeaderBytes),
		ErrorLog:          errLog,
	}
	s.front.configure(proxySrv)
	adminSrv = &http.Server{
		Handler: admin.NewRouterHandler(s.rt, s.reg, s.reload, admin.Options{
			Pprof: cfg.DebugPprof, Version: version, Listen: proxyAddr.String(), Started: s.started,
			Addr:        adminAddr.String(),
			Name:        hostName(cfg.AdminListen),
			Certificate: s.front.certificate,
			Stopping:    s.stopping.Load,
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errLog,
	}
	return proxySrv, adminSrv
}

// drain shuts the proxy and admin servers down, letting requests in
// flight (and upgraded connections on the proxy) finish within timeout,
// then closes what is left.
func drain(logger *slog.Logger, timeout time.Duration, b *balancer.Router, proxySrv, adminSrv *http.Server) {
	logger.Info("shutting down: draining in-flight requests", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, hs := range []*http.Server{proxySrv, adminSrv} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Warn("shutdown did not finish draining", "err", err)
				hs.Close()
			}
			if hs == proxySrv {
				// Shutdown does not wait for upgraded connections
				// (WebSocket tunnels): they get the rest of the time.
				if err := b.WaitTunnels(ctx); err != nil {
					logger.Warn("shutdown closed upgraded connections still open", "err", err)
				}
			}
		}()
	}
	wg.Wait()
}

// slogWriter sends net/http's server error log (TLS handshake errors,
// panics, accept errors) through slog.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	w.l.Warn(msg, "source", "http")
	return len(p), nil
}

// hostName returns the host of a host:port address when it is a name
// rather than an IP address; "" otherwise.
func hostName(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	return host
}
