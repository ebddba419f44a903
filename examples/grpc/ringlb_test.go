package grpc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlb/ringlb/examples/grpc/session"
)

// This file runs the real ringlb binary, built from the repository this
// module sits in, in front of three session servers spoken to over h2c,
// and checks gRPC affinity and failover from a real gRPC client.

// buildRinglb builds cmd/ringlb of the enclosing repository into dir.
func buildRinglb(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build ringlb: %v", err)
	}
	bin := filepath.Join(dir, "ringlb")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/ringlb")
	cmd.Dir = filepath.Join("..", "..") // the repository root, ringlb's module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ringlb: %v\n%s", err, out)
	}
	return bin
}

// sessionServer is a session.Server on loopback that can be told to
// answer every call with UNAVAILABLE, as a server shutting down does.
type sessionServer struct {
	name, addr  string
	unavailable atomic.Bool
}

func startSessionServer(t *testing.T, name string) *sessionServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sessionServer{name: name, addr: ln.Addr().String()}
	refuse := func() error {
		if s.unavailable.Load() {
			return status.Errorf(codes.Unavailable, "%s is unavailable", name)
		}
		return nil
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := refuse(); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := refuse(); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
	srv.RegisterService(&session.ServiceDesc, &session.Server{Name: name})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return s
}

// lineWaiter collects a process's output and hands over the first match
// of re.
type lineWaiter struct {
	re    *regexp.Regexp
	mu    sync.Mutex
	buf   strings.Builder
	found chan []string
	once  sync.Once
}

func (w *lineWaiter) run(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		w.mu.Lock()
		w.buf.WriteString(line + "\n")
		w.mu.Unlock()
		if m := w.re.FindStringSubmatch(line); m != nil {
			w.once.Do(func() { w.found <- m })
		}
	}
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startRinglb runs ringlb serve with config and returns its proxy and
// admin addresses, as its "ringlb serving" log line gives them.
func startRinglb(t *testing.T, bin, dir, config string) (proxy, admin string, logs *lineWaiter) {
	t.Helper()
	path := filepath.Join(dir, "ringlb.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-config", path)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	logs = &lineWaiter{
		re:    regexp.MustCompile(`msg="ringlb serving".* listen=(\S+) admin_listen=(\S+)`),
		found: make(chan []string, 1),
	}
	go logs.run(pr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("ringlb's log:\n%s", logs)
		}
	})
	select {
	case m := <-logs.found:
		return m[1], m[2], logs
	case err := <-exited:
		t.Fatalf("ringlb exited before serving: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("ringlb did not say it was serving within 30s\n%s", logs)
	}
	return "", "", nil
}

// lookup asks ringlb's admin listener where key goes.
type lookupAnswer struct {
	Owner      string   `json:"owner"`
	Preference []string `json:"preference"`
	Chosen     *string  `json:"chosen"`
}

func lookup(t *testing.T, admin, key string) lookupAnswer {
	t.Helper()
	res, err := http.Get("http://" + admin + "/debug/lookup?key=" + url.QueryEscape(key))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var a lookupAnswer
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil || res.StatusCode != http.StatusOK || a.Chosen == nil {
		t.Fatalf("/debug/lookup?key=%s: %d, %+v, %v", key, res.StatusCode, a, err)
	}
	return a
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGRPCThroughRinglb(t *testing.T) {
	dir := t.TempDir()
	bin := buildRinglb(t, dir)
	servers := map[string]*sessionServer{}
	var ups strings.Builder
	for _, name := range []string{"grpc-1", "grpc-2", "grpc-3"} {
		s := startSessionServer(t, name)
		servers[name] = s
		fmt.Fprintf(&ups, "  - {name: %s, url: \"http://%s\", protocol: h2c}\n", name, s.addr)
	}
	const openTimeout = 500 * time.Millisecond
	addr, admin, _ := startRinglb(t, bin, dir, `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
h2c: true
hash:
  key:
    - header: X-Session
  on_missing: reject
ring:
  load_factor: 0
upstreams:
`+ups.String()+`breaker:
  consecutive_failures: 3
  failure_grpc_statuses: [14]
  open_timeout: `+openTimeout.String()+`
  max_open_timeout: 10s
retries: 1
`)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := session.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Every session's unary calls and streams land on its owner.
	owners := map[string]int{}
	for i := range 30 {
		key := fmt.Sprintf("user-%d", i)
		want := lookup(t, admin, key).Owner
		owners[want]++
		h, err := c.Hit(ctx, key)
		if err != nil || h.Server != want || h.Count != 1 {
			t.Fatalf("Hit(%s) = %+v, %v; want server %s, count 1", key, h, err, want)
		}
		var got []session.Hit
		err = c.Watch(ctx, key, &session.WatchRequest{Count: 3}, func(h *session.Hit) { got = append(got, *h) })
		if err != nil || len(got) != 3 {
			t.Fatalf("Watch(%s): %+v, %v", key, got, err)
		}
		for j, h := range got {
			if h.Server != want || h.Count != 2+j {
				t.Fatalf("Watch(%s) message %d = %+v; want server %s, count %d", key, j, h, want, 2+j)
			}
		}
	}
	if len(owners) != 3 {
		t.Fatalf("30 sessions spread over %v; want all three servers", owners)
	}

	// The owner of "alice" answers UNAVAILABLE: after consecutive_failures
	// of them its breaker opens and alice's calls go clockwise.
	home := lookup(t, admin, "alice")
	next := home.Preference[1]
	servers[home.Owner].unavailable.Store(true)
	for i := range 3 {
		_, err := c.Hit(ctx, "alice")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d to an unavailable owner: %v; want UNAVAILABLE passed through", i+1, err)
		}
	}
	if a := lookup(t, admin, "alice"); *a.Chosen != next {
		t.Fatalf("after 3 UNAVAILABLE: /debug/lookup chooses %s; want %s, the next clockwise", *a.Chosen, next)
	}
	h, err := c.Hit(ctx, "alice")
	if err != nil || h.Server != next {
		t.Fatalf("with %s's breaker open: Hit = %+v, %v; want server %s", home.Owner, h, err, next)
	}
	var streamed []session.Hit
	if err := c.Watch(ctx, "alice", &session.WatchRequest{Count: 2}, func(h *session.Hit) { streamed = append(streamed, *h) }); err != nil || len(streamed) != 2 || streamed[0].Server != next {
		t.Fatalf("stream with %s's breaker open: %+v, %v; want server %s", home.Owner, streamed, err, next)
	}

	// It answers again: after open_timeout one call is its trial, and alice
	// is home.
	servers[home.Owner].unavailable.Store(false)
	eventually(t, 10*time.Second, "alice back on "+home.Owner, func() bool {
		h, err := c.Hit(ctx, "alice")
		return err == nil && h.Server == home.Owner
	})
	if a := lookup(t, admin, "alice"); *a.Chosen != home.Owner {
		t.Fatalf("after recovery /debug/lookup chooses %s; want %s", *a.Chosen, home.Owner)
	}
}
