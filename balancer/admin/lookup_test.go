package admin

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

// /debug/lookup with a described request takes its key as the proxy
// would and places it as ?key= does.
func TestLookupRequest(t *testing.T) {
	b, srv := setup(t, nil)
	get := func(q url.Values) (int, map[string]any) {
		t.Helper()
		code, _, body := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?"+q.Encode())
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return code, m
	}
	code, m := get(url.Values{"path": {"/cart?x=1"}, "header": {"X-User-ID: user-42"}, "cookie": {"session=abc"}})
	want := b.Lookup("user-42")
	if code != 200 || m["key"] != "user-42" || m["source"] != "header X-User-ID" || m["owner"] != want.Owner || m["chosen"] != want.Chosen || m["hash"] != want.Hash {
		t.Errorf("request lookup: %d %v, want key user-42 from header X-User-ID on %s", code, m, want.Owner)
	}
	code, m = get(url.Values{"path": {"/cart"}})
	if code != 200 || m["key"] != nil || m["on_missing"] != "random" || m["outcome"] != "a random upstream: no affinity" {
		t.Errorf("request without a key: %d %v", code, m)
	}
	for _, bad := range []url.Values{{"path": {"cart"}}, {"header": {"no colon"}}} {
		if code, m := get(bad); code != 400 || m["error"] == nil {
			t.Errorf("%v: %d %v, want 400", bad, code, m)
		}
	}
}

// POST /debug/lookup takes the request's body (with its Content-Type) as
// the described request's, so json key sources read it as the proxy
// would; it follows the listener's Host and Origin rules.
func TestLookupRequestBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://a.internal:8080")
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: []options.Upstream{{Name: "a", URL: u, Addr: u.Host, Weight: 1}, {Name: "b", URL: u, Addr: u.Host, Weight: 1}},
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash: options.Hash{Key: []key.Source{
				{Kind: key.JSON, Name: "prompt_cache_key"}, {Kind: key.JSON, Name: "user"}, {Kind: key.Host},
			}},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv := httptest.NewUnstartedServer(NewHandler(b, reg, nil, Options{Addr: ln.Addr().String()}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	post := func(q, ctype, body string, hdr ...string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/debug/lookup?"+q, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, m
	}
	for _, tc := range []struct {
		q, ctype, body, key, source string
	}{
		{"path=/v1/chat/completions", "application/json", `{"user":"u-1","prompt_cache_key":"conv-9"}`, "conv-9", "json prompt_cache_key"},
		{"", "application/json; charset=utf-8", `{"model":"m","user":"u-1"}`, "u-1", "json user"},
		{"host=Chat.Example:443", "application/json", `{"model":"m"}`, "chat.example", "host"},
		{"host=chat.example", "text/plain", `{"user":"u-1"}`, "chat.example", "host"},
		{"host=chat.example&header=Content-Type:application/json", "text/plain", `{"user":"u-2"}`, "u-2", "json user"},
	} {
		code, m := post(tc.q, tc.ctype, tc.body)
		if want := b.Lookup(tc.key); code != 200 || m["key"] != tc.key || m["source"] != tc.source || m["owner"] != want.Owner {
			t.Errorf("POST ?%s (%s) %s: %d %v; want key %q from %s, owner %s", tc.q, tc.ctype, tc.body, code, m, tc.key, tc.source, want.Owner)
		}
	}
	if code, m := post("", "application/json", `{"user":"u-1"}`, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("POST from a foreign Origin: %d %v, want 403", code, m)
	}
}

// POST /debug/lookup with a chat body shows the prefix key it yields (the
// model and the messages up to the first user message, canonical), its
// hash and its owner, as the proxy would place the request; a body the
// source finds no key in falls to the next source.
func TestLookupPrefixKey(t *testing.T) {
	u, _ := url.Parse("http://a.internal:8080")
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: []options.Upstream{{Name: "a", URL: u, Addr: u.Host, Weight: 1}, {Name: "b", URL: u, Addr: u.Host, Weight: 1}, {Name: "c", URL: u, Addr: u.Host, Weight: 1}},
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Prefix, Bytes: 256}, {Kind: key.Host}}},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(NewHandler(b, reg, nil, Options{Addr: ln.Addr().String()}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ body, key, source string }{
		{`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}], "model": "llama"}`,
			"\"llama\"\n{\"content\":\"Be brief.\",\"role\":\"system\"}\n{\"content\":\"Hi\",\"role\":\"user\"}", "prefix 256 bytes"},
		{`{"model":"llama","messages":"not a list"}`, "proxy", "host"},
	} {
		res, err := http.Post(srv.URL+"/debug/lookup?path=/v1/chat/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := b.Lookup(tc.key)
		if res.StatusCode != 200 || m["key"] != tc.key || m["source"] != tc.source || m["hash"] != want.Hash || m["owner"] != want.Owner {
			t.Errorf("POST %s: %d %v; want key %q from %s, hash %s, owner %s", tc.body, res.StatusCode, m, tc.key, tc.source, want.Hash, want.Owner)
		}
	}
}
