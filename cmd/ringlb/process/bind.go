package process

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BindError explains why what (say "listen" or "demo upstream app-1")
// could not listen on addr. When the port is taken it names the port and,
// if the process holding it answers HTTP on loopback, what kind of process
// that is: another ringlb (proxy, admin listener or demo upstream) is the
// usual culprit, left running by an earlier `ringlb demo`.
func BindError(what, addr string, err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf("%s: cannot listen on %s: %v", what, addr, err)
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		host = "all interfaces"
	}
	msg := fmt.Sprintf("%s: port %s on %s is already in use", what, port, host)
	if by := portHolder(addr); by != "" {
		msg += " by " + by
	}
	return msg + fmt.Sprintf("; stop that process (Ctrl-C where it runs; `ss -ltnp 'sport = :%s'` shows its PID) or change the port", port)
}

// demoVisit matches a demo upstream's answer, compiled on the first port
// conflict rather than kept by every process.
var demoVisit = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^user .*: visit \d+ on (\S+)\n?$`) })

// portHolder asks whatever listens on addr (through loopback when addr is
// a wildcard) what it is, in a few hundred milliseconds; "" when it cannot
// tell.
func portHolder(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	target := "http://" + net.JoinHostPort(host, port)
	c := &http.Client{
		Timeout:       500 * time.Millisecond,
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer c.CloseIdleConnections()
	get := func(path string) (*http.Response, string, error) {
		res, err := c.Get(target + path)
		if err != nil {
			return nil, "", err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res, string(body), nil
	}
	res, body, err := get("/debug/ring")
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "a process that does not answer HTTP"
		}
		if strings.Contains(err.Error(), "malformed HTTP") || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset") {
			return "a process that does not speak HTTP"
		}
		return ""
	}
	if res.StatusCode == http.StatusOK && strings.Contains(body, `"points_per_weight"`) {
		return "a ringlb admin listener (another ringlb or ringlb demo is running)"
	}
	if res.Header.Get("X-Upstream") != "" {
		return "a ringlb proxy (another ringlb or ringlb demo is running)"
	}
	if m := demoVisit().FindStringSubmatch(body); m != nil {
		return "a ringlb demo upstream (" + m[1] + ": another ringlb demo is running)"
	}
	if s := res.Header.Get("Server"); s != "" {
		return fmt.Sprintf("an HTTP server (Server: %s)", s)
	}
	return "an HTTP server"
}
