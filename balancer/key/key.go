// Package key turns a request into its hash key: the sources of
// hash.key (cookie, header, query, uri, path, ip, host, json, prefix,
// combine),
// each read only from what the upstream will see.
package key

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ringlb/ringlb/ring"
)

// Func extracts one key source from a request; false when the source is
// absent (or empty) on this request.
type Func func(*http.Request) (string, bool)

// Spec is one hash.key entry as the request path reads it: a single
// source (f), or a combine source's parts.
type Spec struct {
	f     Func
	parts []Func
}

// keyBufSize is the size of the buffers combined keys are joined in
// (keyBufs); a longer key allocates.
const keyBufSize = 512

// keyBufs lends the buffers combined keys are joined in. A key is hashed
// before its buffer goes back (ring.Hash does not keep it).
var keyBufs = sync.Pool{New: func() any { return new([keyBufSize]byte) }}

// Hash returns the hash of the entry's key on r, and false when the
// entry is absent on r.
func (k *Spec) Hash(rg *ring.Ring, r *http.Request) (uint64, bool) {
	if k.parts == nil {
		v, ok := k.f(r)
		if !ok {
			return 0, false
		}
		return rg.Hash(v), true
	}
	buf := keyBufs.Get().(*[keyBufSize]byte)
	defer keyBufs.Put(buf)
	v, ok := k.join(r, buf[:0])
	if !ok {
		return 0, false
	}
	return rg.Hash(v), true
}

// Value returns the entry's key on r, a copy that outlives the request.
func (k *Spec) Value(r *http.Request) (string, bool) {
	if k.parts == nil {
		return k.f(r)
	}
	v, ok := k.join(r, nil)
	return strings.Clone(v), ok
}

// join returns a combine entry's key, appended to b and aliasing it: it
// is valid while b's array is not reused.
func (k *Spec) join(r *http.Request, b []byte) (string, bool) {
	for i, p := range k.parts {
		v, ok := p(r)
		if !ok {
			return "", false
		}
		if i > 0 {
			b = append(b, 0)
		}
		b = appendEscaped(b, v)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}

// appendEscaped appends one part of a combined key. Parts are joined with
// a NUL byte, which therefore must not occur in them: a NUL in a value is
// written as 0x01 0x02, and a 0x01 as 0x01 0x01. So two different lists
// of values never join to the same key, and the usual values (no NUL, no
// 0x01) are copied as they are.
func appendEscaped(b []byte, v string) []byte {
	for {
		i := strings.IndexAny(v, "\x00\x01")
		if i < 0 {
			return append(b, v...)
		}
		b = append(b, v[:i]...)
		b = append(b, 1, v[i]+1)
		v = v[i+1:]
	}
}

func New(src Source, trusted []netip.Prefix, bodyLimit int) (Spec, error) {
	if src.Kind != Combine {
		f, err := newFunc(src, trusted, bodyLimit)
		return Spec{f: f}, err
	}
	if len(src.Sources) == 0 {
		return Spec{}, fmt.Errorf("key source combine: needs at least one source")
	}
	parts := make([]Func, 0, len(src.Sources))
	for i, p := range src.Sources {
		if p.Kind == Combine {
			return Spec{}, fmt.Errorf("key source combine[%d]: a combine cannot hold another", i)
		}
		f, err := newFunc(p, trusted, bodyLimit)
		if err != nil {
			return Spec{}, fmt.Errorf("key source combine[%d]: %w", i, err)
		}
		parts = append(parts, f)
	}
	return Spec{parts: parts}, nil
}

func newFunc(src Source, trusted []netip.Prefix, bodyLimit int) (Func, error) {
	switch src.Kind {
	case Cookie:
		if src.Name == "" {
			return nil, fmt.Errorf("key source cookie: needs a name")
		}
		name := src.Name
		return func(r *http.Request) (string, bool) {
			if Dropped(r.Header, "Cookie") {
				return "", false
			}
			return CookieValue(r.Header, name)
		}, nil
	case Header:
		if src.Name == "" {
			return nil, fmt.Errorf("key source header: needs a name")
		}
		name := textproto.CanonicalMIMEHeaderKey(src.Name)
		if hopHeaders[name] {
			// Never forwarded: never a key.
			return func(*http.Request) (string, bool) { return "", false }, nil
		}
		return func(r *http.Request) (string, bool) {
			if v := r.Header[name]; len(v) > 0 && v[0] != "" && !Dropped(r.Header, name) {
				return v[0], true
			}
			return "", false
		}, nil
	case Query:
		if src.Name == "" {
			return nil, fmt.Errorf("key source query: needs a name")
		}
		name := src.Name
		return func(r *http.Request) (string, bool) { return queryValue(r.URL.RawQuery, name) }, nil
	case URI:
		return func(r *http.Request) (string, bool) {
			if r.RequestURI != "" {
				return r.RequestURI, true
			}
			// A request built in-process (not read by a server) has no
			// RequestURI; its URL is the closest thing.
			u := r.URL.RequestURI()
			return u, u != ""
		}, nil
	case Path:
		return func(r *http.Request) (string, bool) { return r.URL.Path, r.URL.Path != "" }, nil
	case IP:
		return func(r *http.Request) (string, bool) { return ClientIP(r, trusted) }, nil
	case Host:
		return hostKey, nil
	case Prefix:
		if src.Bytes < MinPrefixBytes {
			return nil, fmt.Errorf("key source prefix: bytes must be >= %d, got %d", MinPrefixBytes, src.Bytes)
		}
		if src.Bytes > bodyLimit {
			return nil, fmt.Errorf("key source prefix: bytes must be <= the body limit, %d, got %d", bodyLimit, src.Bytes)
		}
		n := src.Bytes
		return func(r *http.Request) (string, bool) { return prefixKey(r, n, bodyLimit) }, nil
	case JSON:
		path, err := parseJSONPath(src.Name)
		if err != nil {
			return nil, fmt.Errorf("key source json: %w", err)
		}
		return func(r *http.Request) (string, bool) { return jsonKey(r, path, bodyLimit) }, nil
	}
	return nil, fmt.Errorf("unknown key source %q", src.Kind)
}

// hopHeaders are the hop-by-hop headers ReverseProxy removes from every
// request it forwards (canonical names).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// Dropped reports whether the request's Connection header lists the
// header name, so that it is removed before the upstream sees it (RFC
// 9110 section 7.6.1). A key is taken only from what is forwarded: the
// application must be able to read the same value.
func Dropped(h http.Header, name string) bool {
	for _, line := range h["Connection"] {
		for line != "" {
			var tok string
			tok, line, _ = strings.Cut(line, ",")
			if strings.EqualFold(textproto.TrimString(tok), name) {
				return true
			}
		}
	}
	return false
}

// String names the source as the status page and /debug/lookup show it:
// "cookie session", "uri", "combine [host, uri]".
func (k Source) String() string {
	if k.Kind == Combine {
		parts := make([]string, len(k.Sources))
		for i, p := range k.Sources {
			parts[i] = p.String()
		}
		return "combine [" + strings.Join(parts, ", ") + "]"
	}
	if k.Kind == Prefix {
		return fmt.Sprintf("prefix %d bytes", k.Bytes)
	}
	if k.Name == "" {
		return string(k.Kind)
	}
	return string(k.Kind) + " " + k.Name
}

// Label names the source in one word, for log lines: "cookie:session",
// "json:prompt_cache_key", "uri", "combine:[host,uri]".
func (k Source) Label() string {
	if k.Kind == Combine {
		parts := make([]string, len(k.Sources))
		for i, p := range k.Sources {
			parts[i] = p.Label()
		}
		return "combine:[" + strings.Join(parts, ",") + "]"
	}
	if k.Kind == Prefix {
		return "prefix:" + strconv.Itoa(k.Bytes)
	}
	if k.Name == "" {
		return string(k.Kind)
	}
	return string(k.Kind) + ":" + k.Name
}

// Source is one entry of hash.key: Name is the cookie, header or query
// parameter name, or the json source's dotted path (empty for the
// others). Sources are a combine source's parts, none of them a combine.
// Bytes is the prefix source's cut.
type Source struct {
	Kind    Kind
	Name    string
	Sources []Source
	Bytes   int
}

// ReadsBody says whether the source (or a part of it) reads the
// request body.
func (k Source) ReadsBody() bool {
	if k.Kind == JSON || k.Kind == Prefix {
		return true
	}
	for _, p := range k.Sources {
		if p.ReadsBody() {
			return true
		}
	}
	return false
}

// Kind names a key source.
type Kind string

// The key sources.
const (
	Cookie Kind = "cookie"
	Header Kind = "header"
	Query  Kind = "query"
	URI    Kind = "uri"
	Path   Kind = "path"
	IP     Kind = "ip"
	// Host is the request's host, lowercased, without port.
	Host Kind = "host"
	// JSON is a string or number field of a JSON request body, Name
	// being its dotted path.
	JSON Kind = "json"
	// Prefix is the start of an LLM request's prompt, canonical, cut at
	// Bytes (see prefixKey).
	Prefix Kind = "prefix"
	// Combine is several sources at once, all present.
	Combine Kind = "combine"
)
