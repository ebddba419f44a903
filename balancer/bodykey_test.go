package balancer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/chat"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// TestJSONKeyHopByHop: over real HTTP, a Content-Type that the
// Connection header names is removed before the upstream sees the
// request, so the json source takes it for absent (the upstream will not
// read the body as JSON) and the next source keys the request; a
// Content-Encoding so named is absent too, and the body is read.
func TestJSONKeyHopByHop(t *testing.T) {
	bes := []*backend{bodyEcho(t, "a"), bodyEcho(t, "b"), bodyEcho(t, "c")}
	for _, be := range bes {
		inner := be.handle
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Saw", fmt.Sprintf("type=%q encoding=%q", r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding")))
			inner(w, r)
		}
	}
	b, _, front := proxy(t, jsonOptions(t, options.DefaultBodyLimit, bes...))
	body := `{"user":"alice"}`
	for _, tc := range []struct {
		name, head string
		status     int
		key        string // its upstream is the one expected; "" for the 400
		saw        string
	}{
		{"Content-Type named", "Content-Type: application/json\r\nConnection: close, Content-Type\r\n", 400, "", ""},
		{"named in lower case, on a line of its own", "Content-Type: application/json\r\nConnection: close\r\nConnection: keep-alive, content-type\r\n", 400, "", ""},
		{"the next source keys it", "Content-Type: application/json\r\nX-Session: s-1\r\nConnection: close, Content-Type\r\n", 200, "s-1", `type="" encoding=""`},
		{"Content-Encoding named", "Content-Type: application/json\r\nContent-Encoding: x-unknown\r\nConnection: close, Content-Encoding\r\n", 200, "alice", `type="application/json" encoding=""`},
		{"nothing named", "Content-Type: application/json\r\nConnection: close\r\n", 200, "alice", `type="application/json" encoding=""`},
	} {
		req := fmt.Sprintf("POST /v1 HTTP/1.1\r\nHost: front\r\nContent-Length: %d\r\n%s\r\n%s", len(body), tc.head, body)
		got := testnet.RawExchange(t, front.Listener.Addr().String(), req, nil)
		want := fmt.Sprintf("HTTP/1.1 %d ", tc.status)
		switch {
		case !strings.HasPrefix(got, want):
			t.Errorf("%s: %.60q..., want %q", tc.name, got, want)
		case tc.key != "" && !strings.Contains(got, fmt.Sprintf("X-Backend: [%q]", b.Lookup(tc.key).Chosen)):
			t.Errorf("%s: not served by %s, the upstream of %q:\n%s", tc.name, b.Lookup(tc.key).Chosen, tc.key, got)
		case tc.key != "" && !strings.Contains(got, fmt.Sprintf("X-Saw: [%q]", tc.saw)):
			t.Errorf("%s: the upstream saw other headers than %s:\n%s", tc.name, tc.saw, got)
		case tc.key != "" && !strings.Contains(got, fmt.Sprintf("body %q", body)):
			t.Errorf("%s: the upstream did not get the body:\n%s", tc.name, got)
		}
	}
}

// bodyEcho is an upstream that answers with the request body it received,
// byte for byte, its framing (len=, chunked=) in headers and its
// trailers, and that names itself in X-Backend.
func bodyEcho(t testing.TB, name string) *backend {
	be := newBackend(t, name)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		w.Header().Set("X-Len", fmt.Sprint(r.ContentLength))
		w.Header().Set("X-Chunked", fmt.Sprint(len(r.TransferEncoding) > 0))
		w.Header().Set("X-Trailer", fmt.Sprint(r.Trailer))
		if err != nil {
			w.Header().Set("X-Read-Error", err.Error())
		}
		w.Write(b)
	}
	return be
}

// jsonOptions keys on json: user, then json: metadata.session, then the
// X-Session header; a request with none gets 400.
func jsonOptions(t testing.TB, limit int, bes ...*backend) Options {
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Hash.Key = []key.Source{{Kind: key.JSON, Name: "user"}, {Kind: key.JSON, Name: "metadata.session"}, {Kind: key.Header, Name: "X-Session"}}
	opts.Hash.OnMissing = options.OnMissingReject
	opts.Hash.BodyLimit = limit
	return opts
}

// TestJSONKeyRouting: over real HTTP, each body framing and each source of
// the chain: the request goes where its key's placement says, and the
// upstream gets the body the client sent, byte for byte, framed the same.
func TestJSONKeyRouting(t *testing.T) {
	bes := []*backend{bodyEcho(t, "a"), bodyEcho(t, "b"), bodyEcho(t, "c")}
	b, _, front := proxy(t, jsonOptions(t, 1024, bes...))
	pad := strings.Repeat("p", 2000) // beyond the limit
	for k := range 12 {
		user, session := fmt.Sprint("user-", k), fmt.Sprint("s-", k)
		for _, tc := range []struct {
			name, body, key string
			hdr             []string
		}{
			{"user", `{"model":"m","user":"` + user + `"}`, user, nil},
			{"nested session", `{"metadata":{"session":"` + session + `"},"x":[1,2]}`, session, nil},
			{"user first in the chain", `{"metadata":{"session":"` + session + `"},"user":"` + user + `"}`, user, nil},
			{"header when the body has neither", `{"model":"m"}`, session, []string{"X-Session", session}},
			{"header when the field is beyond the limit", `{"pad":"` + pad + `","user":"` + user + `"}`, session, []string{"X-Session", session}},
			{"header when the body is not JSON", `{"user" garbage "` + user + `"}`, session, []string{"X-Session", session}},
		} {
			for _, chunked := range []bool{false, true} {
				var body io.Reader = strings.NewReader(tc.body)
				if chunked {
					body = io.MultiReader(strings.NewReader(tc.body)) // no length known: chunked
				}
				req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions", body)
				req.Header.Set("Content-Type", "application/json")
				if chunked {
					req.Trailer = http.Header{"X-Check": nil}
					req.Body = &trailerBody{Reader: body, trailer: req.Trailer, value: "42"}
				}
				for i := 0; i+1 < len(tc.hdr); i += 2 {
					req.Header.Set(tc.hdr[i], tc.hdr[i+1])
				}
				res, err := front.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(res.Body)
				res.Body.Close()
				want := b.Lookup(tc.key).Chosen
				wantLen, wantTrailer := fmt.Sprint(len(tc.body)), "map[]"
				if chunked {
					wantLen, wantTrailer = "-1", "map[X-Check:[42]]"
				}
				switch {
				case res.StatusCode != 200 || res.Header.Get("X-Backend") != want:
					t.Fatalf("%s (chunked %v): %d from %q, want %q (key %q)", tc.name, chunked, res.StatusCode, res.Header.Get("X-Backend"), want, tc.key)
				case string(got) != tc.body || res.Header.Get("X-Read-Error") != "":
					t.Fatalf("%s (chunked %v): upstream got %d bytes (%s), want the %d sent", tc.name, chunked, len(got), res.Header.Get("X-Read-Error"), len(tc.body))
				case res.Header.Get("X-Len") != wantLen || res.Header.Get("X-Chunked") != fmt.Sprint(chunked) || res.Header.Get("X-Trailer") != wantTrailer:
					t.Fatalf("%s (chunked %v): upstream saw length %s, chunked %s, trailers %s; want %s, %v, %s", tc.name, chunked,
						res.Header.Get("X-Len"), res.Header.Get("X-Chunked"), res.Header.Get("X-Trailer"), wantLen, chunked, wantTrailer)
				}
			}
		}
	}
}

// trailerBody sets a trailer's value when its body ends, as a client
// that computes a checksum while sending does.
type trailerBody struct {
	io.Reader
	trailer http.Header
	value   string
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.trailer.Set("X-Check", b.value)
	}
	return n, err
}

func (b *trailerBody) Close() error { return nil }

// TestRequestTrailers: over real HTTP, the upstream gets the trailers a
// chunked request declared in its Trailer header, and no others (Host
// never), whether its key came from its body (read to its end before the
// request is sent, or only in part) or from a header.
func TestRequestTrailers(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, r.Trailer)
		}
	}
	_, _, front := proxy(t, jsonOptions(t, 1024, bes...))
	const sent = "X-A: 1\r\nX-B: 2\r\nHost: evil.example\r\n"
	for _, body := range []string{`{"user":"alice"}`, `{"user":"alice","pad":"` + strings.Repeat("p", 4000) + `"}`} {
		for _, src := range []string{"Content-Type: application/json\r\n", "Content-Type: text/plain\r\nX-Session: s-1\r\n"} {
			for _, tc := range []struct{ declared, want string }{
				{"Trailer: X-A\r\n", "map[X-A:[1]]"},
				{"", "map[]"},
				{"Trailer: X-A, Host\r\n", "map[X-A:[1]]"},
			} {
				req := fmt.Sprintf("POST /v1 HTTP/1.1\r\nHost: front\r\n%s%sTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n%s\r\n",
					src, tc.declared, len(body), body, sent)
				got := testnet.RawExchange(t, front.Listener.Addr().String(), req, nil)
				if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, fmt.Sprintf("body %q", tc.want)) {
					t.Errorf("%d-byte body, %q, %q: the upstream got other trailers than %s:\n%s", len(body), src, tc.declared, tc.want, got)
				}
			}
		}
	}
}

// TestJSONKeyExpectContinue: a client that sends Expect: 100-continue
// and waits for the 100 before its body gets it (reading the body for the
// key needs it), exactly once, and the upstream gets the body. The
// expectation is a token, in any case, maybe among others (net/http sends
// its 100 Continue for "100-Continue, foo" too).
func TestJSONKeyExpectContinue(t *testing.T) {
	be := bodyEcho(t, "a")
	_, _, front := proxy(t, jsonOptions(t, options.DefaultBodyLimit, be, bodyEcho(t, "b")))
	body := `{"user":"alice","messages":[]}`
	for _, expect := range []string{"100-continue", "100-Continue", "100-Continue, foo", "foo, 100-CONTINUE"} {
		for _, framing := range []string{fmt.Sprintf("Content-Length: %d", len(body)), "Transfer-Encoding: chunked"} {
			conn, err := net.Dial("tcp", front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(conn, "POST /v1 HTTP/1.1\r\nHost: front\r\nContent-Type: application/json\r\nExpect: %s\r\n%s\r\nConnection: close\r\n\r\n", expect, framing)
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
				t.Fatalf("Expect %q, %s: before sending the body, read %q, %v; want 100 Continue", expect, framing, line, err)
			}
			if l, _ := br.ReadString('\n'); l != "\r\n" {
				t.Fatalf("Expect %q, %s: 100 Continue followed by %q", expect, framing, l)
			}
			if strings.HasPrefix(framing, "Transfer") {
				fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			} else {
				io.WriteString(conn, body)
			}
			rest, _ := io.ReadAll(br)
			conn.Close()
			got := testnet.CanonicalResponse(rest, http.MethodPost)
			if strings.Contains(got, "100 Continue") || !strings.Contains(got, "HTTP/1.1 200 OK") || !strings.Contains(got, fmt.Sprintf("body %q", body)) {
				t.Errorf("Expect %q, %s: after the body:\n%s\nwant one 200 with the body, no second 100", expect, framing, got)
			}
		}
	}
}

// TestJSONKeyRetryReplaysBody: a request whose key was read from its body
// and whose first upstream refused the connection is sent, whole, to the
// next one.
func TestJSONKeyRetryReplaysBody(t *testing.T) {
	good := bodyEcho(t, "good")
	refused := testnet.RefusedAddr(t)
	ups := []options.Upstream{
		{Name: "good", URL: mustURL(t, good.srv.URL), Weight: 1},
		{Name: "refused", URL: mustURL(t, "http://"+refused), Weight: 1},
	}
	opts := jsonOptions(t, options.DefaultBodyLimit)
	opts.Upstreams = ups
	b, _, front := proxy(t, opts)
	// A key the refusing upstream owns.
	var user string
	for i := 0; user == ""; i++ {
		if k := fmt.Sprint("u", i); b.Lookup(k).Owner == "refused" {
			user = k
		}
		if i > 1000 {
			t.Fatal("no key owned by refused")
		}
	}
	body := `{"user":"` + user + `","prompt":"` + strings.Repeat("z", 100000) + `"}`
	res, err := front.Client().Post(front.URL+"/v1", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Backend") != "good" || string(got) != body {
		t.Errorf("%d from %q with %d bytes; want 200 from good with the %d sent", res.StatusCode, res.Header.Get("X-Backend"), len(got), len(body))
	}
}

// FuzzJSONBodyReplay sends arbitrary bodies, declared JSON, through
// balancers keyed by json sources (with a header after them, so every
// request has a key), framed by Content-Length or chunked, and checks:
// the upstream receives exactly the bytes the client sent; the request
// goes where /debug/lookup's reading of the same request says; and, for
// a valid JSON document within the limit, the json source reads what
// encoding/json's tokenizer reads (the first member of that name). Run it
// with
//
//	go test ./balancer -run '^$' -fuzz FuzzJSONBodyReplay -fuzztime 60s
func FuzzJSONBodyReplay(f *testing.F) {
	f.Add([]byte(`{"user":"alice","messages":[{"role":"user","content":"hi"}]}`), false, uint8(2))
	f.Add([]byte(`{"model":"m","metadata":{"session":"s-1"},"user":12.50}`), true, uint8(1))
	f.Add([]byte(`{"user":"a\u0000b\ud83d\ude00","user":"second"}`), false, uint8(0))
	f.Add([]byte(`{"pad":"`+strings.Repeat("x", 300)+`","user":"late"}`), true, uint8(1))
	f.Add([]byte(`{"a":[1,2,{"b":null}],"user":-0.0e+1}`), false, uint8(2))
	f.Add([]byte(`not json at all`), true, uint8(2))
	f.Add([]byte(`{"user":"truncated`), false, uint8(2))
	f.Add([]byte{}, true, uint8(2))
	f.Add([]byte("{\"x\":\"\xff\xfe\",\"user\":\"\xc3\"}"), false, uint8(2))

	bes := []*backend{bodyEcho(f, "a"), bodyEcho(f, "b"), bodyEcho(f, "c")}
	type front struct {
		b   *Balancer
		url string
		c   *http.Client
	}
	var fronts []front
	var userKeys []key.Spec // the json source of field user, at each limit
	for _, limit := range fuzzLimits {
		ks, err := key.New(key.Source{Kind: key.JSON, Name: "user"}, nil, limit)
		if err != nil {
			f.Fatal(err)
		}
		userKeys = append(userKeys, ks)
		b, _, srv := proxy(f, jsonOptions(f, limit, bes...))
		fronts = append(fronts, front{b, srv.URL, srv.Client()})
	}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool, sel uint8) {
		i := int(sel) % len(fronts)
		fr, limit := fronts[i], fuzzLimits[i]

		// The json source against encoding/json, where both must agree.
		got, ok := userKeys[i].Value(chat.Request(string(body)))
		if json.Valid(body) && utf8.Valid(body) && len(body) <= limit && bytes.Count(body, []byte("[")) < key.MaxDepth-1 {
			if want, wantOK := refJSONKey(body, "user"); got != want || ok != wantOK {
				t.Fatalf("json user from %q: %q, %v; encoding/json reads %q, %v", body, got, ok, want, wantOK)
			}
		}

		// Through the proxy: the body arrives byte for byte, and the key
		// is the one KeyOf finds in the same request.
		probe := chat.Request(string(body))
		probe.Header.Set("X-Session", "fallback")
		key, _, ok := fr.b.KeyOf(probe)
		if !ok {
			t.Fatal("no key, though X-Session is set")
		}
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fr.url+"/v1", rd)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session", "fallback")
		res, err := fr.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		echoed, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !bytes.Equal(echoed, body) || res.Header.Get("X-Read-Error") != "" {
			t.Fatalf("limit %d, chunked %v: %d, upstream got %q (%v %s); sent %q", limit, chunked, res.StatusCode, echoed, err, res.Header.Get("X-Read-Error"), body)
		}
		if want := fr.b.Lookup(key).Chosen; res.Header.Get("X-Backend") != want {
			t.Fatalf("limit %d: %q went to %q, want %q (key %q)", limit, body, res.Header.Get("X-Backend"), want, key)
		}
	})
}

// fuzzLimits are the body limits FuzzJSONBodyReplay's balancers read up
// to: one below most bodies, one around them, the default.
var fuzzLimits = []int{16, 256, options.DefaultBodyLimit}

// refJSONKey is an independent reading of the json source for a valid
// JSON document, with encoding/json's tokenizer: the first top-level
// member called name, when it is a non-empty string or a number (as
// written).
func refJSONKey(body []byte, name string) (string, bool) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return "", false
		}
		if t != name {
			var skip json.RawMessage
			if d.Decode(&skip) != nil {
				return "", false
			}
			continue
		}
		switch v, _ := d.Token(); v := v.(type) {
		case string:
			return v, v != ""
		case json.Number:
			return string(v), true
		}
		return "", false
	}
	return "", false
}
