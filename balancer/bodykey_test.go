package balancer

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testnet"
	"github.com/ringlb/ringlb/ring"
)

// jsonRequest is a request with a JSON body as a server hands it over.
func jsonRequest(body string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// TestJSONKey: what the json source takes from a body and what makes it
// absent, read whole and one byte at a time (a body that arrives slowly).
func TestJSONKey(t *testing.T) {
	long := strings.Repeat("x", 70000)
	for _, tc := range []struct {
		name, path, body string
		want             string // "" for absent
	}{
		{"string", "user", `{"user":"alice"}`, "alice"},
		{"blanks everywhere", "user", " \n\t{ \r\"user\" :\n \"alice\" } ", "alice"},
		{"after other members", "user", `{"model":"m","messages":[{"role":"user","content":"hi \"there\" \\ \u00e9"}],"n":-1.5e+3,"ok":true,"no":false,"z":null,"user":"bob"}`, "bob"},
		{"integer", "user", `{"user":42}`, "42"},
		{"numbers as written", "user", `{"user":1.0}`, "1.0"},
		{"exponent kept", "user", `{"user":-1E-7 }`, "-1E-7"},
		{"zero", "user", `{"user":0,"x":1}`, "0"},
		{"escapes decoded", "user", `{"user":"a\"b\\c\/d\n\u00e9\ud83d\ude00"}`, "a\"b\\c/d\né😀"},
		{"lone surrogate", "user", `{"user":"x\ud800y"}`, "x\ufffdy"},
		{"escaped field name", "user", `{"us\u0065r":"carol"}`, "carol"},
		{"not UTF-8 kept", "user", "{\"user\":\"caf\xe9\"}", "caf\xe9"},
		{"nested", "metadata.session", `{"user":"u","metadata":{"a":[1,{"session":"no"}],"session":"s-1"}}`, "s-1"},
		{"deeper", "a.b.c", `{"a":{"x":{"c":"no"},"b":{"c":7}}}`, "7"},
		{"first wins", "user", `{"user":"first","user":"second"}`, "first"},
		{"first wins even when not a string", "user", `{"user":null,"user":"second"}`, ""},
		{"first parent wins", "m.s", `{"m":{"t":1},"m":{"s":"later"}}`, ""},
		{"same name deeper is not it", "user", `{"meta":{"user":"inner"}}`, ""},
		{"array is not an object", "m.s", `{"m":[{"s":"x"}]}`, ""},
		{"empty string", "user", `{"user":""}`, ""},
		{"null", "user", `{"user":null}`, ""},
		{"bool", "user", `{"user":true}`, ""},
		{"object", "user", `{"user":{"id":1}}`, ""},
		{"array", "user", `{"user":["a"]}`, ""},
		{"missing", "user", `{"model":"m"}`, ""},
		{"empty object", "user", `{}`, ""},
		{"top-level array", "user", `[{"user":"a"}]`, ""},
		{"top-level string", "user", `"user"`, ""},
		{"not JSON", "user", `user=alice`, ""},
		{"empty body", "user", ``, ""},
		{"truncated before", "user", `{"model":"m",`, ""},
		{"truncated number", "user", `{"user":12`, ""},
		{"number with garbage", "user", `{"user":12x}`, ""},
		{"leading zero", "user", `{"user":012}`, ""},
		{"bare dot", "user", `{"user":1.}`, ""},
		{"bad escape", "user", `{"user":"a\qb"}`, ""},
		{"bad escape before", "user", `{"x":"\x","user":"a"}`, ""},
		{"control byte in the value", "user", "{\"user\":\"a\tb\"}", ""},
		{"control byte in the name", "user", "{\"user\n\":\"a\",\"user\":\"b\"}", "b"},
		{"control byte in a string passed over", "user", "{\"x\":\"a\tb\",\"user\":\"a\"}", "a"},
		{"escaped quotes and backslashes passed over", "user", `{"x":"\\\"\\","y":"\\","user":"a"}`, "a"},
		{"missing colon", "user", `{"x" 1,"user":"a"}`, ""},
		{"missing comma", "user", `{"x":1 "user":"a"}`, ""},
		{"trailing comma", "user", `{"x":1,,"user":"a"}`, ""},
		{"mismatched bracket", "user", `{"x":[1},"user":"a"}`, ""},
		{"bad literal", "user", `{"x":nul,"user":"a"}`, ""},
		{"single quotes", "user", `{'user':'a'}`, ""},
		{"nesting passed over", "user", `{"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"user":"a"}`, "a"},
		{"nesting too deep", "user", `{"x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `,"user":"a"}`, ""},
		{"invalid after the field is not read", "user", `{"user":"a", this is not JSON`, "a"},
		{"beyond the limit", "user", `{"pad":"` + long + `","user":"late"}`, ""},
		{"within the limit after a long string", "user", `{"pad":"` + long[:60000] + `","user":"early"}`, "early"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := parseJSONPath(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, slow := range []bool{false, true} {
				r := jsonRequest(tc.body)
				if slow {
					r.Body = io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body)))
				}
				got, ok := jsonKey(r, path, DefaultBodyLimit)
				if got != tc.want || ok != (tc.want != "") {
					t.Errorf("slow %v: %q, %v; want %q", slow, got, ok, tc.want)
				}
				// The body still reads whole, byte for byte.
				if b, err := io.ReadAll(r.Body); err != nil || string(b) != tc.body {
					t.Errorf("slow %v: body read back %d bytes (%v), want the %d sent", slow, len(b), err, len(tc.body))
				}
			}
		})
	}
}

// TestJSONKeyNeedsJSONBody: only an uncompressed body declared JSON is
// read; any other leaves the body untouched.
func TestJSONKeyNeedsJSONBody(t *testing.T) {
	body := `{"user":"alice"}`
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"Application/JSON; charset=utf-8":   true,
		"application/vnd.api+json":          true,
		"application/merge-patch+JSON":      true,
		"text/json":                         false,
		"text/plain":                        false,
		"application/x-www-form-urlencoded": false,
		"+json":                             false,
		"":                                  false,
	} {
		r := jsonRequest(body)
		r.Header.Set("Content-Type", ct)
		if ct == "" {
			r.Header.Del("Content-Type")
		}
		orig := r.Body
		got, ok := jsonKey(r, []string{"user"}, DefaultBodyLimit)
		if ok != want || (ok && got != "alice") {
			t.Errorf("Content-Type %q: %q, %v; want present %v", ct, got, ok, want)
		}
		if !want && r.Body != orig {
			t.Errorf("Content-Type %q: the body was replaced", ct)
		}
	}
	r := jsonRequest(body)
	r.Header.Set("Content-Encoding", "gzip")
	if _, ok := jsonKey(r, []string{"user"}, DefaultBodyLimit); ok {
		t.Error("a gzip body gave a key")
	}
}

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
	b, _, front := proxy(t, jsonOptions(t, DefaultBodyLimit, bes...))
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

// TestJSONKeyLimit: the limit bounds what is read. A string is taken when
// its closing quote is within the limit; a number only when the byte
// after it is (a number cut by the limit is not taken for a shorter one).
func TestJSONKeyLimit(t *testing.T) {
	for _, tc := range []struct {
		body  string
		limit int
		want  bool
	}{
		{`{"user":"abc","x":1}`, 20, true},
		{`{"user":"abc","x":1}`, 13, true},
		{`{"user":"abc","x":1}`, 12, false},
		{`{"user":"abc","x":1}`, 8, false},
		{`{"user":123,"x":1}`, 12, true},
		{`{"user":123,"x":1}`, 11, false},
		{`{"user":123,"x":1}`, 10, false},
	} {
		r := jsonRequest(tc.body)
		r.ContentLength = -1 // read as if chunked
		_, ok := jsonKey(r, []string{"user"}, tc.limit)
		if ok != tc.want {
			t.Errorf("%s, limit %d: present %v, want %v", tc.body, tc.limit, ok, tc.want)
		}
		if p := r.Body.(*bodyPrefix); len(p.buf) > tc.limit {
			t.Errorf("%s, limit %d: read %d bytes", tc.body, tc.limit, len(p.buf))
		}
		if b, _ := io.ReadAll(r.Body); !bytes.Equal(b, []byte(tc.body)) {
			t.Errorf("%s, limit %d: body read back as %q", tc.body, tc.limit, b)
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
	opts.Hash.Key = []KeySource{{Kind: KeyJSON, Name: "user"}, {Kind: KeyJSON, Name: "metadata.session"}, {Kind: KeyHeader, Name: "X-Session"}}
	opts.Hash.OnMissing = OnMissingReject
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
	_, _, front := proxy(t, jsonOptions(t, DefaultBodyLimit, be, bodyEcho(t, "b")))
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
	ups := []UpstreamOptions{
		{Name: "good", URL: mustURL(t, good.srv.URL), Weight: 1},
		{Name: "refused", URL: mustURL(t, "http://"+refused), Weight: 1},
	}
	opts := jsonOptions(t, DefaultBodyLimit)
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

// rewindBody is a request body that a benchmark rewinds between runs.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

// benchJSONKey measures the json source on one body: the request as a
// server hands it over, read up to the field (or the limit), and then
// the body read through as the transport reads it (which gives the
// prefix buffer back to its pool).
func benchJSONKey(b *testing.B, body []byte, want bool) {
	ks, err := newKeySpec(KeySource{Kind: KeyJSON, Name: "prompt_cache_key"}, nil, DefaultBodyLimit)
	if err != nil {
		b.Fatal(err)
	}
	rg := benchRing(b)
	rb := &rewindBody{}
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		rb.Reset(body)
		r.Body = rb
		if _, ok := ks.hash(rg, r); ok != want {
			b.Fatalf("present %v, want %v", ok, want)
		}
		io.Copy(io.Discard, r.Body) // as the upstream's transport reads it
	}
}

// chatBody is an OpenAI-style chat completion body of about size bytes;
// first puts prompt_cache_key before the messages, absent leaves it out.
func chatBody(size int, first, absent bool) []byte {
	key := `"prompt_cache_key":"conv-7f3a9c","user":"u-42",`
	if absent {
		key = `"user":"u-42",`
	}
	var sb strings.Builder
	sb.WriteString(`{"model":"llama-3.1-70b-instruct",`)
	if first {
		sb.WriteString(key)
	}
	sb.WriteString(`"messages":[`)
	for i := 0; sb.Len() < size-200; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":"Turn %d: summarise the \"quarterly\" report, section %d.\nKeep it short; list the risks.%s"}`, i, i, strings.Repeat(" lorem ipsum dolor sit amet", 8))
	}
	sb.WriteString(`],"temperature":0.7,"max_tokens":512,"stream":true`)
	if !first && !absent {
		sb.WriteString("," + strings.TrimSuffix(key, ","))
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

// BenchmarkJSONKey: the json source on a 4 KiB body with the field first
// (the target is at most 2 µs) and on a 64 KiB body without it (at most
// 60 µs: the whole limit is read and checked).
func BenchmarkJSONKey(b *testing.B) {
	b.Run("4KiB-field-first", func(b *testing.B) { benchJSONKey(b, chatBody(4<<10, true, false), true) })
	b.Run("64KiB-field-absent", func(b *testing.B) { benchJSONKey(b, chatBody(64<<10-1, false, true), false) })
}

// BenchmarkKey: extracting and hashing a host and a combined key (no
// allocation).
func BenchmarkKey(b *testing.B) {
	rg := benchRing(b)
	r, _ := http.NewRequest(http.MethodGet, "http://shop.example:8443/item/7?id=42&user=alice", nil)
	r.RequestURI = "/item/7?id=42&user=alice"
	for _, src := range []KeySource{
		{Kind: KeyHost},
		{Kind: KeyCombine, Sources: []KeySource{{Kind: KeyHost}, {Kind: KeyURI}}},
	} {
		ks, err := newKeySpec(src, nil, DefaultBodyLimit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(src.Kind), func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, ok := ks.hash(rg, r); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}

func benchRing(b *testing.B) *ring.Ring {
	rg, err := ring.New([]ring.Member{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}, ring.Options{PointsPerWeight: 160})
	if err != nil {
		b.Fatal(err)
	}
	return rg
}

// reportCPU adds the metric cpu-ns/op: the process's CPU time (user and
// system, all threads, the collector's included) per iteration. On a
// machine other work shares, ns/op counts the time spent waiting for a
// CPU too; cpu-ns/op does not. Call the function it returns when the
// loop is done.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
