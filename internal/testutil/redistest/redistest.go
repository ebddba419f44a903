// Package redistest runs a real redis-server (Debian's redis-server
// package) for tests: each Server is its own process on a free loopback
// port, in the foreground, without persistence, stopped by PID when the
// test ends.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// Options configure a Server.
type Options struct {
	// Password, when set, is required of clients (requirepass).
	Password string
	// CertFile and KeyFile, when set, make the server speak TLS only (on
	// its port; the plain port is off). Clients are not asked for
	// certificates.
	CertFile, KeyFile string
}

// Server is one running redis-server.
type Server struct {
	Port int
	opts Options
	dir  string
	cmd  *exec.Cmd
	t    testing.TB
}

// Start runs redis-server on a free port, or skips the test (fails it
// with CI set) when redis-server is not installed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.SkipExternal(t, "redis-server", "not installed (apt-get install redis-server)")
	}
	s := &Server{opts: o, dir: t.TempDir(), t: t}
	var err error
	for range 5 { // another process may take the free port first
		s.Port = freePort(t)
		if err = s.start(); err == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", err)
	return nil
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL returns the server's redis:// (or, with TLS, rediss://) URL.
func (s *Server) URL() string {
	scheme := "redis"
	if s.opts.CertFile != "" {
		scheme = "rediss"
	}
	return scheme + "://" + s.Addr()
}

func (s *Server) start() error {
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--loglevel", "warning"}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	if s.opts.CertFile != "" {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port),
			"--tls-cert-file", s.opts.CertFile, "--tls-key-file", s.opts.KeyFile, "--tls-auth-clients", "no")
	}
	cmd := exec.Command("redis-server", args...)
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("exited: %v: %s", err, strings.TrimSpace(string(out)))
		default:
		}
		if c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond); err == nil {
			c.Close()
			s.cmd = cmd
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("not listening on %s after 10s", s.Addr())
}

// Stop kills the server (SIGKILL, by PID) and waits for it to exit; its
// records are gone. It may be called more than once.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	for range 200 { // wait until the port is free again
		c, err := net.DialTimeout("tcp", s.Addr(), 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Restart starts the server again on its port (empty: nothing persists).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// Do sends one command over plain TCP (no TLS) in the inline protocol and
// returns the reply's lines, for tests that inspect the server (KEYS,
// INFO, DBSIZE). Bulk and array replies are flattened to their strings.
func (s *Server) Do(args ...string) []string {
	s.t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		s.t.Fatalf("redis: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(c)
	if s.opts.Password != "" {
		writeCmd(w, "AUTH", s.opts.Password)
	}
	writeCmd(w, args...)
	if err := w.Flush(); err != nil {
		s.t.Fatalf("redis: %v", err)
	}
	r := bufio.NewReaderSize(c, 1<<20)
	if s.opts.Password != "" {
		if _, err := readReply(r); err != nil {
			s.t.Fatalf("redis AUTH: %v", err)
		}
	}
	out, err := readReply(r)
	if err != nil {
		s.t.Fatalf("redis %s: %v", args[0], err)
	}
	return out
}

func writeCmd(w *bufio.Writer, args ...string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
}

func readReply(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}, nil
	case '-':
		return nil, fmt.Errorf("%s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []string
		for range n {
			el, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, el...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
