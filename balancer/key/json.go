package key

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/ringlb/ringlb/balancer/reqbody"
)

// The json key source reads a field of a JSON request body. It reads the
// body only as far as it must: a streaming scan stops at the field (or at
// the point where the field can no longer come), pulling more of the body
// only when the bytes it holds run out, and never more than the body
// limit. What it read is kept in a reqbody.Prefix, which the request then
// carries as its body: the upstream reads those bytes first, then the
// rest straight from the client, so it receives the body byte for byte.

// parseJSONPath splits a json source's dotted path ("metadata.session")
// into its field names.
func parseJSONPath(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("needs a field path, like `json: user` or `json: metadata.session`")
	}
	path := strings.Split(s, ".")
	for _, p := range path {
		if p == "" {
			return nil, fmt.Errorf("path %q has an empty field name", s)
		}
	}
	return path, nil
}

// jsonKey is the json source on r: the value of the field at path in
// r's body, read from at most limit bytes of it. The source is absent
// unless the body is declared JSON (Content-Type application/json or
// */*+json) and not compressed (no Content-Encoding), as the upstream
// will see it (a header the Connection header names is not forwarded:
// see dropped), is a JSON object up to the field, and the field is a
// non-empty string (its value, unescaped) or a number (its text as
// written). The first field of that name wins. A request ServeHTTP
// serves carries its reqbody.Prefix already (see reqbody.Tracked), held to
// limits.body_memory and timeouts.client_body; any other request gets
// one of its own, held to neither.
func jsonKey(r *http.Request, path []string, limit int) (string, bool) {
	p, ok := bodyPrefix(r, limit)
	if !ok {
		return "", false
	}
	s := jsonScan{p: p, path: path}
	return s.find()
}

// IsJSONBody reports whether h declares an uncompressed JSON body: a
// Content-Type of application/json or any */*+json (parameters and case
// ignored), and no Content-Encoding. A Content-Type or Content-Encoding
// that the Connection header names is hop-by-hop, removed before the
// upstream sees the request, and so counts as absent: the key is read
// only from a body the upstream will take for the same JSON.
func IsJSONBody(h http.Header) bool {
	if v := h["Content-Encoding"]; len(v) > 0 && v[0] != "" && !Dropped(h, "Content-Encoding") {
		return false
	}
	v := h["Content-Type"]
	if len(v) == 0 || Dropped(h, "Content-Type") {
		return false
	}
	mt, _, _ := strings.Cut(v[0], ";")
	mt = strings.TrimSpace(mt)
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" {
		return false
	}
	if strings.EqualFold(mt, "application/json") {
		return true
	}
	return len(sub) > 5 && strings.EqualFold(sub[len(sub)-5:], "+json")
}

// jsonScan looks for one field of a JSON document in a reqbody.Prefix,
// reading more of the body as it goes. It checks the JSON grammar of
// what it passes (RFC 8259: structure, strings' escapes, numbers,
// literals; control bytes only in the names it compares and in the
// value it takes); bytes after the field are not read.
type jsonScan struct {
	p    *reqbody.Prefix
	path []string
	pos  int // next byte of p.buf to scan
	open int // containers open
	// arrays has bit d set when the container at depth d+1 is an array
	// (clear: an object).
	arrays [MaxDepth / 64]uint64
	// level is the path's fields matched so far: the object at depth
	// level+1 is the one searched for path[level].
	level int
}

// MaxDepth is the deepest nesting the scan follows; a body nested deeper
// has no json key.
const MaxDepth = 512

// push opens a container ('{' or '['); false beyond MaxDepth.
func (s *jsonScan) push(c byte) bool {
	if s.open == MaxDepth {
		return false
	}
	w, bit := s.open/64, uint64(1)<<(s.open%64)
	if c == '[' {
		s.arrays[w] |= bit
	} else {
		s.arrays[w] &^= bit
	}
	s.open++
	return true
}

// top is the innermost open container, '{' or '['.
func (s *jsonScan) top() byte {
	d := s.open - 1
	if s.arrays[d/64]&(1<<(d%64)) != 0 {
		return '['
	}
	return '{'
}

// ensure makes p.buf at least n bytes long; false if the body cannot.
func (s *jsonScan) ensure(n int) bool {
	for len(s.p.Bytes()) < n {
		if !s.p.More() {
			return false
		}
	}
	return true
}

// next skips whitespace and returns the next byte without consuming it.
func (s *jsonScan) next() (byte, bool) {
	for {
		buf := s.p.Bytes()
		for s.pos < len(buf) {
			switch c := buf[s.pos]; c {
			case ' ', '\t', '\n', '\r':
				s.pos++
			default:
				return c, true
			}
		}
		if !s.p.More() {
			return 0, false
		}
	}
}

// The scanner's states between tokens.
const (
	scanValue      = iota // a value
	scanKeyOrEnd          // after '{': a member's name or '}'
	scanKey               // after ',' in an object: a member's name
	scanElemOrEnd         // after '[': a value or ']'
	scanCommaOrEnd        // after a value inside a container
)

// find returns the field's value, or false when the source is absent.
func (s *jsonScan) find() (string, bool) {
	if c, ok := s.next(); !ok || c != '{' {
		return "", false
	}
	s.pos++
	s.push('{')
	state := scanKeyOrEnd
	for {
		c, ok := s.next()
		if !ok {
			return "", false
		}
		switch state {
		case scanKeyOrEnd, scanKey:
			next, v, done, found := s.member(c, state)
			if done {
				return v, found
			}
			state = next
		case scanValue:
			next, ok := s.value(c)
			if !ok {
				return "", false
			}
			state = next
		case scanElemOrEnd:
			if c == ']' {
				s.pos++
				s.open--
				state = scanCommaOrEnd
			} else {
				state = scanValue
			}
		case scanCommaOrEnd:
			top := s.top()
			switch {
			case c == ',' && top == '{':
				s.pos++
				state = scanKey
			case c == ',':
				s.pos++
				state = scanValue
			case c == '}' && top == '{':
				s.pos++
				if !s.pop() {
					return "", false
				}
			case c == ']' && top == '[':
				s.pos++
				s.open--
			default:
				return "", false
			}
		}
	}
}

// member reads, at c, what may start a member in state scanKeyOrEnd or
// scanKey: the object's end (scanKeyOrEnd only) or a name and its colon.
// A name that is the path's at this level decides: its value is the key
// (done, found) on the last level, or an object the scan enters. done
// says the scan is over, with v and found its result.
func (s *jsonScan) member(c byte, state int) (next int, v string, done, found bool) {
	if c == '}' && state == scanKeyOrEnd {
		s.pos++
		if !s.pop() {
			return 0, "", true, false
		}
		return scanCommaOrEnd, "", false, false
	}
	if c != '"' {
		return 0, "", true, false
	}
	start, end, esc, ok := s.str()
	if !ok {
		return 0, "", true, false
	}
	if c, ok := s.next(); !ok || c != ':' {
		return 0, "", true, false
	}
	s.pos++
	if s.open != s.level+1 || !s.nameIs(start, end, esc, s.path[s.level]) {
		return scanValue, "", false, false
	}
	// The field of this level: its value decides.
	c, ok = s.next()
	if !ok {
		return 0, "", true, false
	}
	if s.level == len(s.path)-1 {
		v, found = s.scalar(c)
		return 0, v, true, found
	}
	if c != '{' {
		return 0, "", true, false // not an object: the path cannot go on
	}
	s.pos++
	if !s.push('{') {
		return 0, "", true, false
	}
	s.level++
	return scanKeyOrEnd, "", false, false
}

// value passes over a value that starts with c, entering it when it is an
// object or an array; false when it is not valid JSON.
func (s *jsonScan) value(c byte) (next int, ok bool) {
	switch {
	case c == '{' || c == '[':
		s.pos++
		if !s.push(c) {
			return 0, false
		}
		if c == '[' {
			return scanElemOrEnd, true
		}
		return scanKeyOrEnd, true
	case c == '"':
		_, _, _, ok = s.str()
	case c == 't':
		ok = s.literal("true")
	case c == 'f':
		ok = s.literal("false")
	case c == 'n':
		ok = s.literal("null")
	default:
		_, ok = s.number()
	}
	return scanCommaOrEnd, ok
}

// pop closes an object; false when it is the one searched at this level:
// the field is not in it, and cannot come later.
func (s *jsonScan) pop() bool {
	if s.open == s.level+1 {
		return false
	}
	s.open--
	return true
}
