// Package key turns a request into its hash key: the sources of
// hash.key (cookie, header, query, uri, path, ip, host, json, combine),
// each read only from what the upstream will see.
package key

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
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
	if k.Name == "" {
		return string(k.Kind)
	}
	return string(k.Kind) + ":" + k.Name
}

// hostKey is the host key source: the request's Host (its URL's host
// for a request in absolute form), lowercased, without port and without
// a trailing dot, as nginx's $host reads it; an IPv6 literal keeps its
// brackets. Only a host with upper-case letters allocates.
func hostKey(r *http.Request) (string, bool) {
	h := r.Host
	if h == "" && r.URL != nil {
		h = r.URL.Host // a request built in-process
	}
	if len(h) > 0 && h[0] == '[' {
		if i := strings.IndexByte(h, ']'); i >= 0 {
			h = h[:i+1]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h), true
		}
	}
	return h, h != ""
}

// CookieValue returns the value of the cookie called name exactly as
// net/http's http.Request.Cookie reads it, but without allocating: the
// first pair with that name whose value net/http accepts, reading the
// Cookie header lines in order, pairs split on ";", the pair and the name
// trimmed of ASCII blanks, one pair of surrounding double quotes removed,
// and a value holding bytes a cookie value cannot (controls, non-ASCII,
// double quote, backslash) skipped as net/http skips it. An empty value
// is that cookie too: the source is then absent, not read from a later
// pair ("session=; session=bob" has no key, as the application reads
// ""). So the key is the cookie the application behind ringlb reads.
func CookieValue(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, _ := strings.Cut(textproto.TrimString(part), "=")
			if textproto.TrimString(k) != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if validCookieValue(v) {
				return v, v != ""
			}
		}
	}
	return "", false
}

// validCookieValue reports whether every byte of v may appear in a cookie
// value, by net/http's rule (RFC 6265 cookie-octets, plus space and comma).
func validCookieValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return false
		}
	}
	return true
}

// queryValue returns the first value of the query parameter name in a raw
// query, unescaping only what needs it; an empty value counts as absent.
// Pairs that do not unescape are skipped, as url.ParseQuery skips them.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(part, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			var err error
			if v, err = url.QueryUnescape(v); err != nil {
				continue
			}
		}
		return v, v != ""
	}
	return "", false
}

// ClientIP returns the client's address. Without trusted proxies, or when
// the peer is not one of them, it is the peer's address. When the peer is
// trusted, X-Forwarded-For (every header line, comma-separated entries) is
// walked from the right, skipping trusted entries; the first untrusted
// entry is the client. If every entry is trusted, the leftmost is used.
// Spoofed entries a client put in front are never reached.
func ClientIP(r *http.Request, trusted []netip.Prefix) (string, bool) {
	host := r.RemoteAddr
	if ap, err := netip.ParseAddrPort(host); err == nil {
		addr := ap.Addr()
		if addr.Is4In6() || addr.Zone() != "" {
			host = addr.Unmap().WithZone("").String()
		} else {
			host = HostOnly(host)
		}
		if len(trusted) == 0 || !isTrusted(addr, trusted) {
			return host, true
		}
	} else {
		// Not ip:port (a unix socket, a test): use it whole.
		return host, host != ""
	}
	lines := r.Header["X-Forwarded-For"]
	leftmost := ""
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			var entry string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				entry, line = line, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			addr, err := netip.ParseAddr(entry)
			if err != nil {
				// Garbage cannot be trusted: it is what the client sent.
				return entry, true
			}
			addr = addr.Unmap().WithZone("")
			if !isTrusted(addr, trusted) {
				return canonical(addr, entry), true
			}
			leftmost = entry
		}
	}
	if leftmost != "" {
		addr, _ := netip.ParseAddr(leftmost)
		return canonical(addr.Unmap().WithZone(""), leftmost), true
	}
	return host, true
}

// canonical returns a.String(), without allocating when s, the text a
// was parsed from, already is that string (the usual case).
func canonical(a netip.Addr, s string) string {
	var buf [64]byte
	if string(a.AppendTo(buf[:0])) == s {
		return s
	}
	return a.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// HostOnly strips the port from "host:port" or "[v6]:port".
func HostOnly(hostport string) string {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return hostport
	}
	h := hostport[:i]
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return h
}

// Source is one entry of hash.key: Name is the cookie, header or query
// parameter name, or the json source's dotted path (empty for the
// others). Sources are a combine source's parts, none of them a combine.
type Source struct {
	Kind    Kind
	Name    string
	Sources []Source
}

// ReadsBody says whether the source (or a part of it) reads the
// request body.
func (k Source) ReadsBody() bool {
	if k.Kind == JSON {
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
	// Combine is several sources at once, all present.
	Combine Kind = "combine"
)
