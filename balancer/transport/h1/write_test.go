package h1

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
)

// writeBoth writes req with writeRequest, given what gather made of its
// header map (which must pass: no other reaches writeRequest), and with
// (*http.Request).Write and returns both outputs and errors. size is
// writeRequest's buffer.
func writeBoth(t *testing.T, req *http.Request, size int) (fast, std string, ferr, serr error) {
	t.Helper()
	var hd head
	if err := gather(req.Header, &hd); err != nil {
		t.Fatalf("header %q: %v", req.Header, err)
	}
	var a, b bytes.Buffer
	wa, wb := bufio.NewWriterSize(&a, size), bufio.NewWriter(&b)
	ferr = writeRequest(wa, req, &hd)
	wa.Flush()
	if b, ok := req.Body.(nopCloser); ok {
		b.Seek(0, io.SeekStart) // the same body for Write
	}
	serr = req.Write(wb)
	wb.Flush()
	return a.String(), b.String(), ferr, serr
}

// TestWriteRequestSameBytes: writeRequest writes exactly what
// (*http.Request).Write writes, error for error, over requests mixing what
// Write treats specially (methods, bodies, hosts that are punycoded,
// blanked or carry an IPv6 zone, targets with control bytes, queries set
// or forced, User-Agent absent, blank or padded, values with outer
// spaces, tabs or non-ASCII bytes, many fields, trailers, Close, trace
// hooks), into a buffer that holds the head and into one that does not;
// and a proxied GET as ringlb sends it takes writeRequest's own path,
// with no allocation. Invalid field names and values with control bytes
// (newlines) are validate's to refuse (TestValidateAsBefore): they never
// reach writeRequest.
func TestWriteRequestSameBytes(t *testing.T) {
	methods := []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "CONNECT", ""}
	hosts := []string{"app.example", "app.example:8080", "", "bücher.example", "a b", "[fe80::1%25en0]:80", "[::1]:80", "h\x7f"}
	targets := []string{"/", "/k/1", "/a?b=c&d", "/%2F?x", "/p\x01", "*", "//x", "", "/a/longer/path/with/ü/and spaces?q=0123456789abcdef", "/percent%41ok/%zz"}
	queries := []string{"", "a=b", "c\x01", "0123456789abcdef\x7f", "0123456789abcdef&x=\t", "0123456789abcdef0123456789abcdef"}
	uas := []string{"-", "", "curl/8", "  padded\t", "Mozilla/5.0 (X11; Linux x86_64)"}
	keys := []string{"X-Forwarded-For", "X-Request-Id", "Cdn-Loop", "Accept", "x-lower", "Connection", "connection", "Content-Length", "Transfer-Encoding", "Trailer", "Host", "X-Empty", "Zed", "A", "User-Agent"}
	vals := []string{"v", "", "close", " spaced ", "tab\t", "a,b", "ü", "0123456789abcdef0123456789abcdef", "\t a longer value, with a tab\there ", "non-ASCII längere Wörter"}
	r := rand.New(rand.NewSource(1))
	pick := func(s []string) string { return s[r.Intn(len(s))] }
	own := 0 // requests writeRequest writes itself
	for i := range 5000 {
		// Every other request is one writeRequest may write itself,
		// unless its target, its host or its field count says otherwise.
		plain := i%2 == 0
		pickHost := func() string {
			if plain {
				return hosts[r.Intn(3)]
			}
			return pick(hosts)
		}
		u := &url.URL{Scheme: "http", Host: pickHost()}
		if tg := pick(targets); tg == "*" {
			u.Opaque = "*"
		} else if p, err := url.ParseRequestURI(tg); err == nil {
			u.Path, u.RawPath, u.RawQuery = p.Path, p.RawPath, p.RawQuery
		} else {
			u.Path = tg
		}
		switch r.Intn(8) {
		case 0:
			u.RawQuery = pick(queries) // as set by code, not parsed
		case 1:
			u.ForceQuery = true
		}
		req := &http.Request{Method: pick(methods), URL: u, Header: http.Header{}, Host: pickHost()}
		if plain {
			req.Method = methods[r.Intn(2)]
		}
		if ua := pick(uas); ua != "-" {
			req.Header["User-Agent"] = []string{ua}
		}
		fields := r.Intn(40)
		if plain {
			fields = r.Intn(12)
		}
		for range fields {
			k := pick(keys)
			if r.Intn(4) == 0 {
				k = fmt.Sprint("X-H", r.Intn(50))
			}
			for range 1 + r.Intn(2) {
				req.Header[k] = append(req.Header[k], pick(vals))
			}
			if r.Intn(10) == 0 {
				req.Header[k] = []string{}
			}
		}
		switch mod := r.Intn(12); {
		case plain && mod > 0:
		case mod == 0:
			req.Body, req.ContentLength = http.NoBody, 0
		case mod == 1:
			req.Body, req.ContentLength = nopCloser{strings.NewReader("body")}, 4
		case mod == 2:
			req.Close = true
		case mod == 3:
			req.Trailer = http.Header{"X-T": nil}
			req.Body, req.ContentLength = nopCloser{strings.NewReader("b")}, -1
		case mod == 4:
			req.ContentLength = 3 // with no body: Write's error
		case mod == 5:
			req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteHeaderField: func(string, []string) {}}))
		case mod == 6:
			req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }}))
		}
		size := 4096
		if i%4 == 0 {
			size = 16 + r.Intn(400) // the head does not fit: left to Write
		}
		var hd head
		gather(req.Header, &hd)
		if _, ok := fastHead(req, &hd); ok {
			own++
		}
		if got, want := hd.connection, req.Header.Get("Connection"); got != want {
			t.Fatalf("request %d, header %q: Connection %q gathered, %q by Get", i, req.Header, got, want)
		}
		fast, std, ferr, serr := writeBoth(t, req, size)
		if fast != std || fmt.Sprint(ferr) != fmt.Sprint(serr) {
			t.Fatalf("request %d (%s %s, Host %q, header %q, buffer %d):\nwriteRequest %q, %v\nWrite        %q, %v", i, req.Method, u, req.Host, req.Header, size, fast, ferr, std, serr)
		}
	}

	if own < 500 {
		t.Errorf("writeRequest wrote %d of the requests itself", own)
	}
	t.Logf("writeRequest wrote %d of 5000 requests itself", own)

	// ringlb's outbound GET: ReverseProxy's clone with the forwarding
	// headers, the request id and CDN-Loop, and its 1xx trace hook.
	req, _ := http.NewRequest("GET", "http://127.0.0.1:9001/k/42?x=1", nil)
	req.Host = "shop.example"
	for k, v := range map[string]string{"User-Agent": "", "X-Forwarded-For": "192.0.2.1", "X-Forwarded-Host": "shop.example",
		"X-Forwarded-Proto": "http", "X-Request-Id": "0123456789abcdef0123456789abcdef", "Cdn-Loop": "ringlb-1a2b", "Accept": "*/*"} {
		req.Header[k] = []string{v}
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }}))
	var hd head
	if err := validate(req, &hd); err != nil {
		t.Fatal(err)
	}
	if _, ok := fastHead(req, &hd); !ok {
		t.Fatal("a proxied GET is not written by writeRequest's own path")
	}
	for _, size := range []int{4096, 64} {
		fast, std, _, _ := writeBoth(t, req, size)
		if fast != std {
			t.Fatalf("proxied GET, buffer %d:\nwriteRequest %q\nWrite        %q", size, fast, std)
		}
	}
	bw := bufio.NewWriterSize(io.Discard, 4096)
	fastAllocs := testing.AllocsPerRun(100, func() {
		var hd head
		validate(req, &hd)
		writeRequest(bw, req, &hd)
		bw.Flush()
	})
	stdAllocs := testing.AllocsPerRun(100, func() { req.Write(bw); bw.Flush() })
	if fastAllocs > 0 {
		t.Errorf("writeRequest: %v allocations per proxied GET (Write: %v)", fastAllocs, stdAllocs)
	}
	t.Logf("allocations per proxied GET: writeRequest %v, Write %v", fastAllocs, stdAllocs)
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

// BenchmarkWriteRequest: ringlb's outbound GET head, checked by validate
// and written by writeRequest, and written by (*http.Request).Write.
func BenchmarkWriteRequest(b *testing.B) {
	req, _ := http.NewRequest("GET", "http://127.0.0.1:9001/k/42", nil)
	req.Host = "127.0.0.1:19180"
	for k, v := range map[string]string{"User-Agent": "", "X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "127.0.0.1:19180",
		"X-Forwarded-Proto": "http", "X-Request-Id": "0123456789abcdef0123456789abcdef", "Cdn-Loop": "ringlb-1a2b"} {
		req.Header[k] = []string{v}
	}
	bw := bufio.NewWriterSize(io.Discard, 4096)
	b.Run("writeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var hd head
			if err := validate(req, &hd); err != nil {
				b.Fatal(err)
			}
			writeRequest(bw, req, &hd)
			bw.Flush()
		}
	})
	b.Run("Write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req.Write(bw)
			bw.Flush()
		}
	})
}
