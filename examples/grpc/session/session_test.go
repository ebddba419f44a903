package session_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlb/ringlb/examples/grpc/session"
)

// start serves a session.Server on loopback and returns its address.
func start(t *testing.T, s *session.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&session.ServiceDesc, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *session.Client {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return session.NewClient(cc)
}

func TestHitAndWatch(t *testing.T) {
	c := dial(t, start(t, &session.Server{Name: "grpc-1"}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for want := 1; want <= 3; want++ {
		h, err := c.Hit(ctx, "alice")
		if err != nil || *h != (session.Hit{Server: "grpc-1", Session: "alice", Count: want}) {
			t.Fatalf("Hit = %+v, %v; want count %d", h, err, want)
		}
	}
	if h, err := c.Hit(ctx, "bob"); err != nil || h.Count != 1 {
		t.Errorf("another session: %+v, %v", h, err)
	}
	var counts []int
	err := c.Watch(ctx, "alice", &session.WatchRequest{Count: 3}, func(h *session.Hit) { counts = append(counts, h.Count) })
	if err != nil || len(counts) != 3 || counts[0] != 4 || counts[2] != 6 {
		t.Errorf("Watch: counts %v, %v; want [4 5 6]", counts, err)
	}
	if _, err := c.Hit(ctx, ""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Hit without a session: %v, want InvalidArgument", err)
	}
}

// The stream's first message arrives while the server waits to send the
// second.
func TestWatchStreams(t *testing.T) {
	c := dial(t, start(t, &session.Server{Name: "grpc-1"}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Watch(ctx, "alice", &session.WatchRequest{Count: 2, Interval: time.Hour}, func(h *session.Hit) {
		if h.Count == 1 {
			cancel()
		}
	})
	if status.Code(err) != codes.Canceled || ctx.Err() != context.Canceled {
		t.Errorf("Watch = %v (ctx %v); want Canceled after the first message", err, ctx.Err())
	}
}

func TestUnavailable(t *testing.T) {
	addr := start(t, &session.Server{Name: "grpc-2", Unavailable: true})
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Hit(ctx, "alice"); status.Code(err) != codes.Unavailable {
		t.Errorf("Hit = %v, want Unavailable", err)
	}
	err := c.Watch(ctx, "alice", &session.WatchRequest{Count: 1}, func(*session.Hit) {})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Watch = %v, want Unavailable", err)
	}

	// On the wire, as a proxy sees it: HTTP 200 whose only HEADERS frame
	// ends the stream and carries grpc-status 14 (a trailers-only
	// response); net/http shows those fields in Header, not Trailer.
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: p}}
	body := new(bytes.Buffer)
	body.WriteByte(0) // not compressed
	binary.Write(body, binary.BigEndian, uint32(2))
	body.WriteString("{}")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/"+session.ServiceName+"/Hit", body)
	req.Header.Set("Content-Type", "application/grpc+json")
	req.Header.Set("TE", "trailers")
	req.Header.Set(session.MetadataKey, "alice")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
		t.Errorf("body %q, %v; want none", b, err)
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.Header.Get("Grpc-Status") != "14" || len(resp.Trailer) != 0 {
		t.Errorf("status %d %s, header grpc-status %q, trailers %v; want 200, HTTP/2, 14 in the header, no trailers",
			resp.StatusCode, resp.Proto, resp.Header.Get("Grpc-Status"), resp.Trailer)
	}
}
