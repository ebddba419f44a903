package key

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// refPrefixKey is the prefix key of body made the slow way, to check
// prefixKey against: encoding/json finds the fields and splits the
// prompt into its elements, github.com/gowebpki/jcs writes each in
// canonical form. It reads the whole body. It is rule 18 as written: the
// model, then the messages through the first user one, or else the
// prompt (a string, or an array's first element), or else the input,
// whole.
func refPrefixKey(body []byte, n int) (string, bool) {
	if !json.Valid(body) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, _ := dec.Token(); t != json.Delim('{') {
		return "", false
	}
	var model json.RawMessage
	fields := map[string]json.RawMessage{} // the first messages, prompt and input
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", false
		}
		switch name := t.(string); {
		case name == "model" && model == nil:
			model = raw
		case name == "messages" || name == "prompt" || name == "input":
			if _, seen := fields[name]; !seen {
				fields[name] = raw
			}
		}
	}
	// messages, else prompt, else input, wherever each stands.
	field, prompt := "", json.RawMessage(nil)
	for _, f := range []string{"messages", "prompt", "input"} {
		if v, ok := fields[f]; ok {
			field, prompt = f, v
			break
		}
	}
	var parts []string
	if model != nil {
		c, err := jcs.Transform(model)
		if err != nil {
			return "", false
		}
		parts = append(parts, string(c))
	}
	switch {
	case field == "messages" && prompt[0] != '[':
		return "", false
	case field == "prompt" && prompt[0] == '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(prompt, &elems); err != nil {
			return "", false
		}
		if len(elems) > 0 {
			c, err := jcs.Transform(elems[0])
			if err != nil {
				return "", false
			}
			parts = append(parts, string(c))
		}
	case field == "messages":
		var elems []json.RawMessage
		if err := json.Unmarshal(prompt, &elems); err != nil {
			return "", false
		}
		for _, e := range elems {
			c, err := jcs.Transform(e)
			if err != nil {
				return "", false
			}
			parts = append(parts, string(c))
			if e[0] == '{' {
				var m map[string]json.RawMessage
				var role string
				if json.Unmarshal(e, &m) == nil && json.Unmarshal(m["role"], &role) == nil && role == "user" && bytes.HasPrefix(bytes.TrimSpace(m["role"]), []byte(`"`)) {
					break
				}
			}
		}
	case field != "":
		c, err := jcs.Transform(prompt)
		if err != nil {
			return "", false
		}
		parts = append(parts, string(c))
	}
	k := strings.Join(parts, "\n")
	if len(k) > n {
		k = k[:n]
	}
	return k, k != ""
}

// prefixOf runs the prefix source on body, limit bytes of it readable,
// and checks that the body still reads whole afterwards.
func prefixOf(t testing.TB, body []byte, n, limit int) (string, bool) {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	f, err := newFunc(Source{Kind: Prefix, Bytes: n}, nil, limit)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := f(r)
	v = strings.Clone(v)
	got, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("body after the key: %q (%v), want it byte for byte", got, err)
	}
	return v, ok
}

// hasSurrogateEscape says body may hold a \u escape of a surrogate,
// which encoding/json and jcs take (making U+FFFD of a lone one) and a
// canonical writer must refuse.
func hasSurrogateEscape(body []byte) bool {
	lower := bytes.ToLower(body)
	for _, p := range []string{`\ud8`, `\ud9`, `\uda`, `\udb`, `\udc`, `\udd`, `\ude`, `\udf`} {
		if bytes.Contains(lower, []byte(p)) {
			return true
		}
	}
	return false
}

// TestPrefixKeyMatchesReference: on random chat, completion and
// responses bodies (valid JSON, Unicode, written with random
// whitespace, escapes, number forms and field orders) the prefix key
// is the reference's, for cuts from the least to beyond the key, and
// the same whatever way the body writes the same values.
func TestPrefixKeyMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		v := randomBody(rng)
		body := []byte(encodeRandom(rng, v))
		other := []byte(encodeRandom(rng, v)) // the same values, written another way
		for _, cut := range []int{16, 17 + rng.IntN(200), 64 << 10} {
			want, wok := refPrefixKey(body, cut)
			got, ok := prefixOf(t, body, cut, 1<<20)
			if ok != wok || got != want {
				t.Fatalf("case %d, bytes %d: body %s\ngot  %v %q\nwant %v %q", i, cut, body, ok, got, wok, want)
			}
			if again, ok2 := prefixOf(t, other, cut, 1<<20); ok2 != ok || again != got {
				t.Fatalf("case %d, bytes %d: the same values written two ways give two keys:\n%s\n%s\n%q\n%q", i, cut, body, other, got, again)
			}
		}
	}
}

// FuzzPrefixKey: on any body the prefix source must not panic, must
// give a key of at most bytes bytes, leave the body whole, and on a body
// that is valid JSON and Unicode agree with the reference (encoding/json
// and gowebpki/jcs). Run it with
//
//	go test ./balancer/key -run '^$' -fuzz FuzzPrefixKey -fuzztime 60s
func FuzzPrefixKey(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`,
		`{"messages":[{"content":"a\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t\u0001","role":"user"}],"model":"m"}`,
		`{"model":"m","prompt":["a",1.50,-0,1e21,1E-7,0.000001,123456789012345678]}`,
		`{"model":"m","input":"hi"}`,
		`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}]}`,
		`{"model":{"b":1,"a":2,"\u20ac":3,"\ud83d\ude00":4,"\ufb33":5}}`,
		`{"model":"m","messages":"hi"}`,
		`{"model":"m","messages":[{"role":"user","role":"user"}]}`,
		`{"model":1e400}`,
		`{"model":"\ud800"}`,
		`[1,2]`,
		`{"model":"m",}`,
	} {
		f.Add([]byte(s), uint16(40))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		n := MinPrefixBytes + int(cut)%4096
		got, ok := prefixOf(t, body, n, 1<<20)
		if len(got) > n || ok != (got != "") {
			t.Fatalf("key %v %q: longer than %d bytes, or empty and present", ok, got, n)
		}
		if !utf8.Valid(body) || hasSurrogateEscape(body) || depth(body) > MaxDepth-2 {
			return
		}
		want, wok := refPrefixKey(body, n)
		if !wok {
			return // the reference takes less than the writer: JSON it finds invalid is not checked further
		}
		if ok != wok || got != want {
			t.Fatalf("body %q, bytes %d:\ngot  %v %q\nwant %v %q", body, n, ok, got, wok, want)
		}
	})
}

// depth is an upper bound of body's nesting.
func depth(body []byte) int { return bytes.Count(body, []byte("{")) + bytes.Count(body, []byte("[")) }
