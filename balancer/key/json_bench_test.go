package key

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/internal/testutil/chat"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/ring"
)

// benchJSONKey measures the json source on one body: the request as a
// server hands it over, read up to the field (or the limit), and then
// the body read through as the transport reads it (which gives the
// prefix buffer back to its pool).
func benchJSONKey(b *testing.B, body []byte, want bool) {
	ks, err := New(Source{Kind: JSON, Name: "prompt_cache_key"}, nil, testBodyLimit)
	if err != nil {
		b.Fatal(err)
	}
	rg := benchRing(b)
	rb := &chat.Rewind{}
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer testenv.ReportCPU(b)()
	for b.Loop() {
		rb.Reset(body)
		r.Body = rb
		if _, ok := ks.Hash(rg, r); ok != want {
			b.Fatalf("present %v, want %v", ok, want)
		}
		io.Copy(io.Discard, r.Body) // as the upstream's transport reads it
	}
}

// BenchmarkJSONKey: the json source on a 4 KiB body with the field first
// (the target is at most 2 µs) and on a 64 KiB body without it (at most
// 60 µs: the whole limit is read and checked).
func BenchmarkJSONKey(b *testing.B) {
	b.Run("4KiB-field-first", func(b *testing.B) { benchJSONKey(b, chat.Body(4<<10, true, false), true) })
	b.Run("64KiB-field-absent", func(b *testing.B) { benchJSONKey(b, chat.Body(64<<10-1, false, true), false) })
}

// benchPrefixKey measures the prefix source, cut at n bytes, on one
// body, as benchJSONKey does the json source; ref makes the key the
// other way, reading the body whole and handing its parts to
// encoding/json and github.com/gowebpki/jcs (refPrefixKey).
func benchPrefixKey(b *testing.B, body []byte, n int, ref bool) {
	ks, err := New(Source{Kind: Prefix, Bytes: n}, nil, testBodyLimit)
	if err != nil {
		b.Fatal(err)
	}
	rg := benchRing(b)
	rb := &chat.Rewind{}
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer testenv.ReportCPU(b)()
	for b.Loop() {
		rb.Reset(body)
		r.Body = rb
		var ok bool
		if ref {
			p, _ := bodyPrefix(r, testBodyLimit)
			for p.More() {
			}
			var k string
			if k, ok = refPrefixKey(p.Bytes(), n); ok {
				rg.Hash(k)
			}
		} else {
			_, ok = ks.Hash(rg, r)
		}
		if !ok {
			b.Fatal("no key")
		}
		io.Copy(io.Discard, r.Body)
	}
}

// BenchmarkPrefixKey: the prefix source on a 4 KiB chat body (the target
// is at most 3 µs and one allocation, the request's prefix, which a
// request ServeHTTP serves does not allocate) and on 64 KiB ones read
// to the end (at most 60 µs of CPU): a chat body with the model last
// (the messages after the first are passed over), and a long system
// prompt cut at 64 KiB with the model last (all of it is written);
// writer is the canonical writer over the streaming scan, library the
// body read whole and given to encoding/json and gowebpki/jcs.
func BenchmarkPrefixKey(b *testing.B) {
	for _, impl := range []string{"writer", "library"} {
		ref := impl == "library"
		b.Run("4KiB-chat/"+impl, func(b *testing.B) { benchPrefixKey(b, chat.Body(4<<10, true, false), 256, ref) })
		b.Run("64KiB-chat-model-last/"+impl, func(b *testing.B) { benchPrefixKey(b, modelLast(chat.Body(64<<10-1, false, true)), 256, ref) })
		b.Run("64KiB-long-system-model-last/"+impl, func(b *testing.B) { benchPrefixKey(b, chat.LongSystem(64<<10-1), 64<<10, ref) })
	}
}

// modelLast moves a chat.Body's model to its end: the prefix source
// then reads the whole body, passing over the messages after the first.
func modelLast(body []byte) []byte {
	const model = `"model":"llama-3.1-70b-instruct",`
	b := bytes.Replace(body, []byte(model), nil, 1)
	return append(b[:len(b)-1], ","+strings.TrimSuffix(model, ",")+"}"...)
}

// BenchmarkKey: extracting and hashing a host and a combined key (no
// allocation).
func BenchmarkKey(b *testing.B) {
	rg := benchRing(b)
	r, _ := http.NewRequest(http.MethodGet, "http://shop.example:8443/item/7?id=42&user=alice", nil)
	r.RequestURI = "/item/7?id=42&user=alice"
	for _, src := range []Source{
		{Kind: Host},
		{Kind: Combine, Sources: []Source{{Kind: Host}, {Kind: URI}}},
	} {
		ks, err := New(src, nil, testBodyLimit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(src.Kind), func(b *testing.B) {
			b.ReportAllocs()
			defer testenv.ReportCPU(b)()
			for b.Loop() {
				if _, ok := ks.Hash(rg, r); !ok {
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
