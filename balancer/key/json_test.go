package key

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/internal/testutil/chat"
)

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
				r := chat.Request(tc.body)
				if slow {
					r.Body = io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body)))
				}
				got, ok := jsonKey(r, path, testBodyLimit)
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
		r := chat.Request(body)
		r.Header.Set("Content-Type", ct)
		if ct == "" {
			r.Header.Del("Content-Type")
		}
		orig := r.Body
		got, ok := jsonKey(r, []string{"user"}, testBodyLimit)
		if ok != want || (ok && got != "alice") {
			t.Errorf("Content-Type %q: %q, %v; want present %v", ct, got, ok, want)
		}
		if !want && r.Body != orig {
			t.Errorf("Content-Type %q: the body was replaced", ct)
		}
	}
	r := chat.Request(body)
	r.Header.Set("Content-Encoding", "gzip")
	if _, ok := jsonKey(r, []string{"user"}, testBodyLimit); ok {
		t.Error("a gzip body gave a key")
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
		r := chat.Request(tc.body)
		r.ContentLength = -1 // read as if chunked
		_, ok := jsonKey(r, []string{"user"}, tc.limit)
		if ok != tc.want {
			t.Errorf("%s, limit %d: present %v, want %v", tc.body, tc.limit, ok, tc.want)
		}
		if p := r.Body.(*reqbody.Prefix); len(p.Bytes()) > tc.limit {
			t.Errorf("%s, limit %d: read %d bytes", tc.body, tc.limit, len(p.Bytes()))
		}
		if b, _ := io.ReadAll(r.Body); !bytes.Equal(b, []byte(tc.body)) {
			t.Errorf("%s, limit %d: body read back as %q", tc.body, tc.limit, b)
		}
	}
}
