package balancer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAffinityPerSource checks, for each key source, that one key always
// reaches the same upstream and that different keys spread.
func TestAffinityPerSource(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	cases := []struct {
		src KeySource
		req func(front, key string) (string, []string)
	}{
		{KeySource{Kind: KeyCookie, Name: "session"}, func(f, k string) (string, []string) {
			return f + "/x", []string{"Cookie", "other=1; session=" + k}
		}},
		{KeySource{Kind: KeyHeader, Name: "x-user-id"}, func(f, k string) (string, []string) {
			return f + "/x", []string{"X-User-ID", k}
		}},
		{KeySource{Kind: KeyQuery, Name: "user"}, func(f, k string) (string, []string) {
			return f + "/x?a=1&user=" + k + "&b=2", nil
		}},
		{KeySource{Kind: KeyURI}, func(f, k string) (string, []string) {
			return f + "/p/" + k + "?q=1", nil
		}},
		{KeySource{Kind: KeyPath}, func(f, k string) (string, []string) {
			return f + "/p/" + k, nil
		}},
		{KeySource{Kind: KeyIP}, func(f, k string) (string, []string) {
			return f + "/x", []string{"X-Forwarded-For", "10.1.0." + k}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.src.Kind, func(t *testing.T) {
			opts := baseOptions(upstreamsOf(t, bes...))
			opts.Key = []KeySource{tc.src}
			opts.OnMissing = "reject" // a missing key would show as 400
			opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			_, _, front := proxy(t, opts)
			c := front.Client()
			seen := map[string]bool{}
			for k := range 30 {
				key := fmt.Sprint(k + 1)
				target, hdr := tc.req(front.URL, key)
				_, first, _ := get(t, c, target, hdr...)
				for range 5 {
					code, got, _ := get(t, c, target, hdr...)
					if code != 200 || got != first {
						t.Fatalf("key %s: got %d from %q, first went to %q", key, code, got, first)
					}
				}
				seen[first] = true
			}
			if len(seen) < 2 {
				t.Errorf("30 keys all went to %v", seen)
			}
		})
	}
}

func TestAffinityCookie(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Key = []KeySource{{Kind: KeyHeader, Name: "X-User-ID"}}
	opts.OnMissing = "cookie"
	opts.CookieName = "ringlb_affinity"
	opts.CookieTTL = 24 * time.Hour
	opts.CookieSecure = true
	opts.CookieHTTPOnly = true
	b, _, front := proxy(t, opts)
	c := front.Client()

	res, err := c.Get(front.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	sc := res.Header.Get("Set-Cookie")
	for _, want := range []string{"ringlb_affinity=", "Path=/", "Max-Age=86400", "HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %q", sc, want)
		}
	}
	cookies := res.Cookies()
	if len(cookies) != 1 || len(cookies[0].Value) != 32 {
		t.Fatalf("cookies %v", cookies)
	}
	id := cookies[0].Value
	first := res.Header.Get("X-Backend")
	if want := b.Lookup(id).Chosen; first != want {
		t.Errorf("first request went to %s, the cookie's key belongs to %s", first, want)
	}
	// Later requests carrying the cookie stick, and the cookie beats the
	// header source; no new cookie is set.
	for i := range 20 {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
		req.Header.Set("Cookie", "ringlb_affinity="+id)
		req.Header.Set("X-User-ID", fmt.Sprint("user", i))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := res.Header.Get("X-Backend"); got != first {
			t.Fatalf("request %d with the cookie went to %s, not %s", i, got, first)
		}
		if res.Header.Get("Set-Cookie") != "" {
			t.Fatalf("cookie set again: %q", res.Header.Get("Set-Cookie"))
		}
	}
}

func TestOnMissingReject(t *testing.T) {
	be := newBackend(t, "a")
	opts := baseOptions(upstreamsOf(t, be))
	opts.Key = []KeySource{{Kind: KeyCookie, Name: "session"}, {Kind: KeyHeader, Name: "X-User-ID"}}
	opts.OnMissing = "reject"
	_, _, front := proxy(t, opts)
	code, _, body := get(t, front.Client(), front.URL+"/")
	if code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", code)
	}
	if want := "missing hash key: the request has none of cookie session, header X-User-ID\n"; body != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if be.hits.Load() != 0 {
		t.Error("rejected request reached the upstream")
	}
}

func TestForwardingHeaders(t *testing.T) {
	be := newBackend(t, "a")
	type seen struct {
		host, xff, proto, fhost, foo, conn, keepAlive string
	}
	got := make(chan seen, 1)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, strings.Join(r.Header.Values("X-Forwarded-For"), "|"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("X-Foo"), r.Header.Get("Connection"), r.Header.Get("Keep-Alive")}
		w.Header().Set("X-Upstream", "spoofed")
		io.WriteString(w, "ok")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/x", nil)
	req.Host = "shop.example"
	req.Header.Add("X-Forwarded-For", "198.51.100.1")
	req.Header.Add("X-Forwarded-For", "198.51.100.2, 198.51.100.3")
	req.Header.Set("Connection", "X-Foo")
	req.Header.Set("X-Foo", "hop")
	req.Header.Set("Keep-Alive", "timeout=5")
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	s := <-got
	want := seen{host: "shop.example", xff: "198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1",
		proto: "http", fhost: "shop.example"}
	if s != want {
		t.Errorf("upstream saw %+v\nwant           %+v", s, want)
	}
	if v := res.Header.Values("X-Upstream"); len(v) != 1 || v[0] != "a" {
		t.Errorf("X-Upstream %q, want [a]", v)
	}
}

func TestSSEStreams(t *testing.T) {
	be := newBackend(t, "a")
	release := make(chan struct{})
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "31") // not chunked: only the SSE rule flushes
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two-and-more\n\n")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/events", nil)
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(release) // the second event exists only now
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two-and-more\n\n" {
		t.Fatalf("rest: %q, %v", rest, err)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not an upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 64)
		for {
			n, err := brw.Read(buf)
			if err != nil {
				return
			}
			conn.Write(buf[:n])
		}
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: ws.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("X-Upstream") != "a" {
		t.Fatalf("status %d, X-Upstream %q", res.StatusCode, res.Header.Get("X-Upstream"))
	}
	for _, msg := range []string{"hello", "again"} {
		io.WriteString(conn, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q: %q, %v", msg, buf, err)
		}
	}
}

func TestMidBodyFailureTruncates(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		// More than the servers buffer, so the headers and a part of the
		// body reach the client before the failure.
		w.Header().Set("Content-Length", "1000000")
		w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the backend dies mid-body
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	res, err := front.Client().Get(front.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || len(body) == 0 || len(body) >= 1000000 {
		t.Fatalf("status %d, %d body bytes, err %v: want 200 and a truncated body", res.StatusCode, len(body), err)
	}
	if n := b.inflight.Load(); n != 0 {
		t.Errorf("in flight after abort: %d", n)
	}
	if v := metric(t, reg, "ringlb_upstream_inflight", "upstream=a"); v != 0 {
		t.Errorf("ringlb_upstream_inflight{a} = %v", v)
	}
}

// keyOwnedBy finds a key whose owner is name.
func keyOwnedBy(t testing.TB, b *Balancer, name string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprint("k", i)
		if b.Lookup(k).Owner == name {
			return k
		}
	}
	t.Fatalf("no key owned by %s", name)
	return ""
}

func TestRetryRefused(t *testing.T) {
	live := newBackend(t, "live")
	ups := upstreamsOf(t, live)
	dead := deadURL(t)
	ups = append(ups, UpstreamOptions{Name: "dead", URL: dead, Addr: dead.Host, Weight: 1})
	b, reg, front := proxy(t, baseOptions(ups))
	key := keyOwnedBy(t, b, "dead")
	c := front.Client()

	code, got, _ := get(t, c, front.URL+"/", "X-User-ID", key)
	if code != 200 || got != "live" {
		t.Fatalf("GET: %d from %q, want 200 from live", code, got)
	}
	// A refused connection sent nothing, so even a POST with a body moves on.
	res, err := c.Post(front.URL+"/?user="+key, "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Backend") != "live" {
		t.Fatalf("POST: %d from %q", res.StatusCode, res.Header.Get("X-Backend"))
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=dead"); v != 2 {
		t.Errorf("ringlb_retries_total{dead} = %v, want 2", v)
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=live", "code=200"); v != 2 {
		t.Errorf("ringlb_requests_total{live,200} = %v, want 2", v)
	}

	// Without retries the failure reaches the client as 502.
	opts := baseOptions(ups)
	opts.Retries = 0
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	res, err = c.Get(front.URL + "/?user=" + key)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || res.Header.Get("X-Upstream") != "dead" {
		t.Errorf("no retries: %d %q (X-Upstream %q), want 502 from dead", res.StatusCode, body, res.Header.Get("X-Upstream"))
	}
}

func TestFailModeNoRetry(t *testing.T) {
	live := newBackend(t, "live")
	ups := upstreamsOf(t, live)
	dead := deadURL(t)
	ups = append(ups, UpstreamOptions{Name: "dead", URL: dead, Addr: dead.Host, Weight: 1})
	opts := baseOptions(ups)
	opts.OnUnavailable = "fail"
	opts.LoadFactor = 0
	b, reg, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "dead")
	if code, _, _ := get(t, front.Client(), front.URL+"/?user="+key); code != http.StatusBadGateway {
		t.Errorf("failure under fail: %d, want 502", code)
	}
	b.SetHealthy("dead", false, "test")
	code, _, body := get(t, front.Client(), front.URL+"/?user="+key)
	if code != http.StatusServiceUnavailable || body != "upstream dead for this key is unavailable\n" {
		t.Errorf("unavailable owner under fail: %d %q", code, body)
	}
	if v := metric(t, reg, "ringlb_no_upstream_total"); v != 1 {
		t.Errorf("ringlb_no_upstream_total = %v", v)
	}
	if live.hits.Load() != 0 {
		t.Errorf("fail mode served a dead owner's key elsewhere")
	}
}

func TestServerErrorPassedThrough(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	for _, be := range []*backend{a, bb} {
		be.handle = func(w http.ResponseWriter, r *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }
	}
	_, reg, front := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	code, _, body := get(t, front.Client(), front.URL+"/?user=u1")
	if code != http.StatusServiceUnavailable || body != "busy\n" {
		t.Errorf("got %d %q, want the upstream's 503", code, body)
	}
	if hits := a.hits.Load() + bb.hits.Load(); hits != 1 {
		t.Errorf("upstreams hit %d times, want 1 (no retry)", hits)
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=a") + metric(t, reg, "ringlb_retries_total", "upstream=b"); v != 0 {
		t.Errorf("retries counted: %v", v)
	}
}

func TestNoUpstreamAvailable(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	if !b.Ready() {
		t.Fatal("not ready with two healthy upstreams")
	}
	b.SetHealthy("a", false, "test")
	code, got, _ := get(t, front.Client(), front.URL+"/?user=x")
	if code != 200 || got != "b" {
		t.Fatalf("with a down: %d from %q", code, got)
	}
	b.SetHealthy("b", false, "test")
	code, _, body := get(t, front.Client(), front.URL+"/?user=x")
	if code != http.StatusServiceUnavailable || body != "no upstream available\n" {
		t.Errorf("all down: %d %q", code, body)
	}
	if b.Ready() {
		t.Error("ready with nothing available")
	}
	if v := metric(t, reg, "ringlb_no_upstream_total"); v != 1 {
		t.Errorf("ringlb_no_upstream_total = %v", v)
	}
	if v := metric(t, reg, "ringlb_upstream_available", "upstream=a"); v != 0 {
		t.Errorf("ringlb_upstream_available{a} = %v", v)
	}
	if v := metric(t, reg, "ringlb_ejections_total", "upstream=a", "reason=health"); v != 1 {
		t.Errorf("ringlb_ejections_total{a,health} = %v", v)
	}
	// Back up: exactly its keys return.
	b.SetHealthy("a", true, "test")
	key := keyOwnedBy(t, b, "a")
	if _, got, _ := get(t, front.Client(), front.URL+"/?user="+key); got != "a" {
		t.Errorf("a's key went to %q after a came back", got)
	}
}

func TestReloadUnderLoad(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	small := baseOptions(upstreamsOf(t, bes[:3]...))
	big := baseOptions(upstreamsOf(t, bes...))
	big.Upstreams[0].Weight = 2
	b, reg, front := proxy(t, small)
	c := front.Client()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				res, err := c.Get(fmt.Sprintf("%s/?user=g%d-%d", front.URL, g, i))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", res.StatusCode)
					return
				}
			}
		}()
	}
	var last string
	for i := range 20 {
		o := small
		if i%2 == 0 {
			o = big
		}
		v, err := b.Update(o)
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b.Version() != last {
		t.Fatalf("version %s, last update gave %s", b.Version(), last)
	}
	// The last update (i = 19) installed the small ring: d is gone.
	for i := range 50 {
		key := fmt.Sprint("after", i)
		_, got, _ := get(t, c, front.URL+"/?user="+key)
		if want := b.Lookup(key).Chosen; got != want || got == "d" {
			t.Fatalf("key %s went to %q, the ring says %q", key, got, want)
		}
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=d"); v != -1 {
		t.Errorf("removed upstream d still has series (%v)", v)
	}
	if v := metric(t, reg, "ringlb_ring_info", "version="+last); v != 1 {
		t.Errorf("ringlb_ring_info{%s} = %v", last, v)
	}
}

func TestSameOptionsSameChoice(t *testing.T) {
	ups := []UpstreamOptions{}
	for _, n := range []string{"app-1", "app-2", "app-3", "app-4", "app-5"} {
		u := mustURL(t, "http://"+n+".internal:8080")
		ups = append(ups, UpstreamOptions{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	ups[2].Weight = 2.5
	b1, err := New(baseOptions(ups), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rev := make([]UpstreamOptions, len(ups))
	for i := range ups {
		rev[len(ups)-1-i] = ups[i]
	}
	b2, err := New(baseOptions(rev), NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Version() != b2.Version() {
		t.Fatalf("versions differ: %s, %s", b1.Version(), b2.Version())
	}
	for i := range 10000 {
		k := fmt.Sprint("user-", i)
		if c1, c2 := b1.Lookup(k).Chosen, b2.Lookup(k).Chosen; c1 != c2 || c1 == "" {
			t.Fatalf("key %s: %q vs %q", k, c1, c2)
		}
	}
}

func TestBoundedLoadsSpreadHotKey(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	arrived := make(chan string, 4)
	release := make(chan struct{})
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("block") == "1" {
				arrived <- be.name
				<-release
			}
			io.WriteString(w, be.name)
		}
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, bes...)))
	owner := b.Lookup("hot").Owner
	c := front.Client()

	// Hold three slow requests for the hot key. With c = 1.25 and three
	// equal upstreams the owner's cap is ceil(1.25 × (in-flight+1) / 3):
	// the first goes to the owner (cap 1), the second overflows (cap 1),
	// the third fits on the owner again (cap 2), and with three in flight
	// the cap is 2, which the owner holds.
	var wg sync.WaitGroup
	holders := map[string]int{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Get(front.URL + "/?block=1&user=hot")
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		select {
		case name := <-arrived:
			holders[name]++
		case <-time.After(10 * time.Second):
			t.Fatal("slow request never arrived")
		}
	}
	if holders[owner] != 2 || len(holders) != 2 {
		t.Errorf("slow requests held by %v; owner is %s", holders, owner)
	}
	// The owner is full: the next request for the key goes elsewhere.
	_, got, _ := get(t, c, front.URL+"/?user=hot")
	if got == owner {
		t.Errorf("hot key went to its full owner %s", owner)
	}
	if lk := b.Lookup("hot"); lk.Chosen == owner || len(lk.Skipped) == 0 || lk.Skipped[0].Name != owner || lk.Skipped[0].Reason != "full" {
		t.Errorf("lookup while full: %+v", lk)
	}
	close(release)
	wg.Wait()
	if v := metric(t, reg, "ringlb_overflow_total", "upstream="+owner); v != 2 {
		t.Errorf("ringlb_overflow_total{%s} = %v, want 2", owner, v)
	}
	if _, got, _ := get(t, c, front.URL+"/?user=hot"); got != owner {
		t.Errorf("after release the hot key went to %s, not its owner %s", got, owner)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	ups := upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"))
	opts := baseOptions(ups)
	opts.SlowStart = time.Minute
	b, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.snap.Load()
	h := s.ring.Hash("user-1")
	tried := []int{1}
	if n := testing.AllocsPerRun(1000, func() { b.pick(s, h, tried, nil) }); n != 0 {
		t.Errorf("pick allocates %v times", n)
	}
}

func TestUpdateKeepsState(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	b, _, _ := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	ua := b.snap.Load().members[0].u
	b.SetHealthy("a", false, "test")
	opts := baseOptions(upstreamsOf(t, a, bb, newBackend(t, "c")))
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	s := b.snap.Load()
	if s.members[0].u != ua || ua.Available() {
		t.Error("upstream a lost its identity or state over a reload")
	}
	bad := opts
	bad.Upstreams = nil
	if _, err := b.Update(bad); err == nil || b.snap.Load() != s {
		t.Errorf("empty update: err %v, snapshot changed %v", err, b.snap.Load() != s)
	}
}

func TestSlowStartAfterReload(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	opts := baseOptions(upstreamsOf(t, a))
	opts.SlowStart = time.Minute
	b, _, _ := proxy(t, opts)
	now := time.Now()
	b.now = func() time.Time { return now }
	b.epoch = now.Add(-time.Hour)
	opts.Upstreams = upstreamsOf(t, a, bb)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		for i := range 2000 {
			if b.Lookup(fmt.Sprint(i)).Chosen == "b" {
				n++
			}
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("b took %d keys at fraction 0", n)
	}
	now = now.Add(30 * time.Second)
	half := count()
	now = now.Add(31 * time.Second)
	full := count()
	if !(half > 0 && half < full) || full < 800 {
		t.Errorf("b's keys: %d at half, %d at full", half, full)
	}
	if st := b.Status(); st.Upstreams[1].ActiveFraction != 1 {
		t.Errorf("active fraction after slow start %v", st.Upstreams[1].ActiveFraction)
	}
}

// TestAffinityCookieSurvives1xx: the generated affinity cookie reaches
// the client on the final response when the upstream sends a 103 Early
// Hints first (net/http sends and clears the header map with a 1xx), and
// such a request is still retried elsewhere when its upstream fails
// after the 1xx.
func TestAffinityCookieSurvives1xx(t *testing.T) {
	hints := func(w http.ResponseWriter) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		panic(http.ErrAbortHandler) // a fails after its 1xx
	}
	bb.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		io.WriteString(w, "b")
	}
	opts := baseOptions(upstreamsOf(t, a, bb))
	opts.Key = []KeySource{{Kind: KeyHeader, Name: "X-User-ID"}}
	opts.OnMissing = "cookie"
	opts.CookieName = "ringlb_affinity"
	_, _, front := proxy(t, opts)
	c := front.Client()
	for i := 0; i < 50 && a.hits.Load() < 3; i++ {
		res, err := c.Get(front.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("X-Backend") != "b" {
			t.Errorf("request %d: %d from %q, want 200 from b (a's failures retried)", i, res.StatusCode, res.Header.Get("X-Backend"))
		}
		if cs := res.Cookies(); len(cs) != 1 || cs[0].Name != "ringlb_affinity" || len(cs[0].Value) != 32 {
			t.Errorf("request %d: cookies %v, want the affinity cookie", i, cs)
		}
	}
	if a.hits.Load() == 0 {
		t.Fatal("no random key landed on a in 50 requests")
	}
}

// TestQueryForwardedAsReceived: the request target's query reaches the
// upstream exactly as the client sent it, also when it holds ";", a bad
// "%" escape or more parameters than net/url parses (ReverseProxy would
// re-encode it: drop pairs and sort the rest, breaking signed URLs).
func TestQueryForwardedAsReceived(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.RequestURI) }
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	many := strings.Repeat("p=1&", 10001) + "user=u"
	for _, target := range []string{
		"/s?sig=abc;def&expires=1",
		"/s?z=1&a=2&x=%zz",
		"/s?b=2&a=1&a=%41",
		"/s?" + many,
		"/s?",
	} {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		conn.Close()
		if string(got) != target {
			show := func(s string) string {
				if len(s) > 60 {
					return s[:60] + "..."
				}
				return s
			}
			t.Errorf("sent %q, upstream got %q", show(target), show(string(got)))
		}
	}
}

// echoUpgrade is a WebSocket-like upstream: it switches protocols and
// echoes what it reads.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	buf := make([]byte, 64)
	for {
		n, err := brw.Read(buf)
		if err != nil {
			return
		}
		conn.Write(buf[:n])
	}
}

// TestUpgradeKeepsBytesSentWithRequest: bytes a client sends right
// behind its upgrade request, in the same write, reach the upstream.
func TestUpgradeKeepsBytesSentWithRequest(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = echoUpgrade
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%v %v", res, err)
	}
	buf := make([]byte, len("early"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
		t.Fatalf("echo of the early bytes: %q, %v", buf, err)
	}
}

// TestNo1xxToHTTP10: an HTTP/1.0 client never gets a 1xx (RFC 9110
// 15.2): an nginx in front, speaking HTTP/1.0 by default, would take it
// as the final response.
func TestNo1xxToHTTP10(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "final")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET / %s\r\nHost: x\r\nConnection: close\r\n\r\n", proto)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := 200
		if proto == "HTTP/1.1" {
			want = http.StatusEarlyHints // 1.1 clients do get it
		}
		if res.StatusCode != want {
			t.Errorf("%s: first response %d, want %d", proto, res.StatusCode, want)
		}
	}
}
