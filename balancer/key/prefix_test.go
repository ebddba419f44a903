package key

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/internal/testutil/chat"
	"github.com/ringlb/ringlb/ring"
)

// TestPrefixKey: what the prefix source keys on, and what makes it
// absent, read whole and one byte at a time.
func TestPrefixKey(t *testing.T) {
	long := strings.Repeat("x", 70000)
	sys := `{"role":"system","content":"You are terse."}`
	for _, tc := range []struct {
		name, body string
		bytes      int
		want       string // "" for absent
	}{
		{"chat", `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}`, 1000,
			`"m"` + "\n" + `{"content":"You are terse.","role":"system"}` + "\n" + `{"content":"hi","role":"user"}`},
		{"canonical: blanks, escapes, order", " {\n\"messages\" : [ { \"content\" : \"h\\u0069 \\/ \\u00e9\\n\" , \"role\":\"user\" } ] , \"model\" : \"m\" } ", 1000,
			`"m"` + "\n" + `{"content":"hi / é\n","role":"user"}`},
		{"numbers as ECMAScript writes them", `{"model":"m","input":[1.0,-0,1E2,1e21,0.000001,1e-7,123456789012345678]}`, 1000,
			`"m"` + "\n" + `[1,0,100,1e+21,0.000001,1e-7,123456789012345680]`},
		{"names sorted by UTF-16 units", `{"model":{"\ufb33":1,"\ud83d\ude00":2,"b":3,"a":4}}`, 1000,
			`{"a":4,"b":3,"😀":2,"` + "\ufb33" + `":1}`},
		{"first user message ends it", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, 1000,
			`"m"` + "\n" + `{"content":"a","role":"user"}`},
		{"no user message: all of them", `{"model":"m","messages":[` + sys + `,{"role":"assistant","content":"x"}]}`, 1000,
			`"m"` + "\n" + `{"content":"You are terse.","role":"system"}` + "\n" + `{"content":"x","role":"assistant"}`},
		{"role user only at the message's level", `{"model":"m","messages":[{"role":"tool","content":{"role":"user"}},{"role":"user","content":"q"}]}`, 1000,
			`"m"` + "\n" + `{"content":{"role":"user"},"role":"tool"}` + "\n" + `{"content":"q","role":"user"}`},
		{"cut", `{"model":"m","messages":[{"role":"user","content":"0123456789abcdef"}]}`, 20,
			`"m"` + "\n" + `{"content":"0123`},
		{"cut inside a long system prompt", `{"model":"m","messages":[{"role":"system","content":"` + long[:60000] + `"},{"role":"user","content":"q"}]}`, 32,
			`"m"` + "\n" + `{"content":"` + long[:16]},
		{"model after the messages", `{"messages":[{"role":"user","content":"a"}],"stream":true,"model":"m"}`, 1000,
			`"m"` + "\n" + `{"content":"a","role":"user"}`},
		{"model after the messages, cut", `{"messages":[{"role":"user","content":"abcdefghijklmnopqrstuvwxyz"}],"model":"m"}`, 20,
			`"m"` + "\n" + `{"content":"abcd`},
		{"model not a string", `{"model":{"name":"m","v":2},"prompt":"p"}`, 1000, `{"name":"m","v":2}` + "\n" + `"p"`},
		{"completion", `{"model":"m","prompt":"Once upon a time","max_tokens":5}`, 1000, `"m"` + "\n" + `"Once upon a time"`},
		{"completion, prompt list: its first element", `{"model":"m","prompt":["a","b"]}`, 1000, `"m"` + "\n" + `"a"`},
		{"completion, empty prompt list", `{"model":"m","prompt":[]}`, 1000, `"m"`},
		{"responses, input text", `{"model":"m","input":"Tell me"}`, 1000, `"m"` + "\n" + `"Tell me"`},
		{"responses, input whole", `{"model":"m","input":[{"role":"developer","content":"d"},{"type":"message","role":"user","content":[{"type":"input_text","text":"t"}]}]}`, 1000,
			`"m"` + "\n" + `[{"content":"d","role":"developer"},{"content":[{"text":"t","type":"input_text"}],"role":"user","type":"message"}]`},
		{"messages before prompt, wherever they stand", `{"model":"m","prompt":"p","messages":[{"role":"user","content":"u"}]}`, 1000, `"m"` + "\n" + `{"content":"u","role":"user"}`},
		{"prompt before input, wherever they stand", `{"input":"i","model":"m","prompt":"p"}`, 1000, `"m"` + "\n" + `"p"`},
		{"messages not an array, even after a prompt", `{"model":"m","prompt":"p","messages":"not even an array"}`, 1000, ""},
		{"first model wins", `{"model":"a","model":"b","prompt":"p"}`, 1000, `"a"` + "\n" + `"p"`},
		{"model alone", `{"model":"m","stream":true}`, 1000, `"m"`},
		{"prompt alone", `{"messages":[{"role":"user","content":"a"}]}`, 1000, `{"content":"a","role":"user"}`},
		{"empty messages", `{"model":"m","messages":[]}`, 1000, `"m"`},
		{"escaped field names", `{"mod\u0065l":"m","pr\u006fmpt":"p"}`, 1000, `"m"` + "\n" + `"p"`},
		{"invalid after the key is not read", `{"model":"m","messages":[{"role":"user","content":"a"}, this is not JSON`, 1000,
			`"m"` + "\n" + `{"content":"a","role":"user"}`},
		{"long body, key early", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"` + long + `"}]}`, 1000,
			`"m"` + "\n" + `{"content":"a","role":"user"}`},

		{"neither model nor prompt", `{"stream":true,"n":1}`, 1000, ""},
		{"empty object", `{}`, 1000, ""},
		{"empty messages, no model", `{"messages":[]}`, 1000, ""},
		{"messages not an array", `{"model":"m","messages":"hi"}`, 1000, ""},
		{"messages an object", `{"model":"m","messages":{"role":"user"}}`, 1000, ""},
		{"top-level array", `[{"model":"m"}]`, 1000, ""},
		{"not JSON", `model=m`, 1000, ""},
		{"invalid before the key is complete", `{"model":"m","messages":[{"role":"user","content":"a",}]}`, 1000, ""},
		{"invalid while the model is looked for", `{"messages":[{"role":"user","content":"a"}],"x":nul,"model":"m"}`, 1000, ""},
		{"truncated", `{"model":"m","messages":[{"role":"user","content":"a"`, 1000, ""},
		{"beyond the limit before the model", `{"messages":[{"role":"user","content":"a"}],"pad":"` + long + `","model":"m"}`, 1000, ""},
		{"beyond the limit inside the cut's message", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 32, ""},
		{"name twice in a message", `{"model":"m","messages":[{"role":"user","role":"user","content":"a"}]}`, 1000, ""},
		{"lone surrogate", `{"model":"m","prompt":"a\ud800b"}`, 1000, ""},
		{"not UTF-8", "{\"model\":\"m\",\"prompt\":\"caf\xe9\"}", 1000, ""},
		{"number beyond a double", `{"model":"m","prompt":[1e400]}`, 1000, ""},
		{"control byte in a string", "{\"model\":\"m\",\"prompt\":\"a\tb\"}", 1000, ""},
		{"nesting too deep", `{"model":"m","prompt":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, 1000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, slow := range []bool{false, true} {
				r := chat.Request(tc.body)
				if slow {
					r.Body = io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body)))
				}
				got, ok := prefixKey(r, tc.bytes, testBodyLimit)
				if got != tc.want || ok != (tc.want != "") {
					t.Errorf("slow %v:\n got %v %q\nwant %q", slow, ok, got, tc.want)
				}
				if b, err := io.ReadAll(r.Body); err != nil || string(b) != tc.body {
					t.Errorf("slow %v: body read back %d bytes (%v), want the %d sent", slow, len(b), err, len(tc.body))
				}
			}
		})
	}
}

// TestPrefixKeyReadsWhatItNeeds: the scan stops at the end of the first
// user message when the model came before it, and reads on to the model
// when it did not.
func TestPrefixKeyReadsWhatItNeeds(t *testing.T) {
	first := `{"model":"m","messages":[{"role":"user","content":"hello"}`
	rest := `,{"role":"assistant","content":"` + strings.Repeat("y", 20000) + `"}]}`
	r := chat.Request(first + rest)
	r.Body = io.NopCloser(iotest.OneByteReader(strings.NewReader(first + rest)))
	if _, ok := prefixKey(r, 1000, testBodyLimit); !ok {
		t.Fatal("no key")
	}
	if n := len(r.Body.(*reqbody.Prefix).Bytes()); n > len(first)+1 {
		t.Errorf("read %d bytes of the body, want at most %d: the first user message's end and one byte", n, len(first)+1)
	}
}

// TestPrefixKeyNeedsJSONBody: a body not declared JSON, or compressed,
// has no prefix key and is left untouched.
func TestPrefixKeyNeedsJSONBody(t *testing.T) {
	body := `{"model":"m","prompt":"p"}`
	for _, h := range []http.Header{
		{"Content-Type": {"text/plain"}},
		{},
		{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}},
		{"Content-Type": {"application/json"}, "Content-Encoding": {"br"}},
	} {
		r := chat.Request(body)
		r.Header = h
		orig := r.Body
		if v, ok := prefixKey(r, 100, testBodyLimit); ok || r.Body != orig {
			t.Errorf("headers %v: key %q, %v (body replaced: %v); want none, untouched", h, v, ok, r.Body != orig)
		}
	}
}

// TestPrefixSourceBytes: bytes must be within [MinPrefixBytes, the body
// limit].
func TestPrefixSourceBytes(t *testing.T) {
	for n, ok := range map[int]bool{15: false, 16: true, 4096: true, testBodyLimit: true, testBodyLimit + 1: false} {
		if _, err := New(Source{Kind: Prefix, Bytes: n}, nil, testBodyLimit); (err == nil) != ok {
			t.Errorf("bytes %d: error %v, want ok %v", n, err, ok)
		}
	}
	src := Source{Kind: Prefix, Bytes: 256}
	if src.String() != "prefix 256 bytes" || src.Label() != "prefix:256" || !src.ReadsBody() {
		t.Errorf("names %q, %q, reads body %v", src.String(), src.Label(), src.ReadsBody())
	}
}

// TestPrefixKeyAllocs: a chat body's prefix key and its hash take no
// allocation beyond the request's prefix, whose scratch buffer comes
// from a pool.
func TestPrefixKeyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: sync.Pool drops buffers at random")
	}
	body := chat.Body(4<<10, true, false)
	ks, err := New(Source{Kind: Prefix, Bytes: 256}, nil, testBodyLimit)
	if err != nil {
		t.Fatal(err)
	}
	rg, err := ring.New([]ring.Member{{Name: "a", Weight: 1}}, ring.Options{PointsPerWeight: 160})
	if err != nil {
		t.Fatal(err)
	}
	rb := &chat.Rewind{}
	r := chat.Request("")
	r.ContentLength = int64(len(body))
	var p reqbody.Prefix
	n := testing.AllocsPerRun(200, func() {
		rb.Reset(body)
		p = reqbody.Prefix{}
		p.Init(rb, r.ContentLength, testBodyLimit, nil)
		r.Body = &p
		if _, ok := ks.Hash(rg, r); !ok {
			t.Fatal("no key")
		}
		io.Copy(io.Discard, r.Body)
	})
	if n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
