package key

// The JSON scan's lexer: strings and their escapes, numbers, literals.

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// str scans the string whose opening quote is at pos, leaving pos after
// its closing quote: start and end delimit its content in p.buf, esc says
// it holds escapes. False when its escapes are not JSON's, or it does not
// end within the body or the limit. Control bytes inside it (which JSON
// does not allow) are not looked for here: the field's name and value
// are checked for them (checkControl), strings passed over are not.
func (s *jsonScan) str() (start, end int, esc, ok bool) {
	start = s.pos + 1
	end, esc, ok = s.strFrom(start)
	return start, end, esc, ok
}

// strFrom scans a string from i, inside it and not inside an escape, to
// its closing quote (end), leaving pos after that; esc says it holds
// escapes after i.
func (s *jsonScan) strFrom(i int) (end int, esc, ok bool) {
	// Bytes before i are passed: no quote ends the string there.
	q := -1 // the first quote at or after i, once one is found
	for {
		buf := s.p.Bytes()
		if q < i {
			if j := bytes.IndexByte(buf[i:], '"'); j >= 0 {
				q = i + j
			}
		}
		lim := q
		if q < i {
			lim = len(buf)
		}
		b := bytes.IndexByte(buf[i:lim], '\\')
		if b < 0 {
			if q >= i {
				s.pos = q + 1
				return q, esc, true
			}
			i = len(buf)
			if !s.p.More() {
				return 0, false, false
			}
			continue
		}
		i += b
		esc = true
		if !s.ensure(i + 2) {
			return 0, false, false
		}
		switch s.p.Bytes()[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if !s.ensure(i+6) || !isHex4(s.p.Bytes()[i+2:i+6]) {
				return 0, false, false
			}
			i += 6
		default:
			return 0, false, false
		}
	}
}

// hasControl reports whether b holds a control byte (< 0x20), which a
// JSON string may not.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// nameIs reports whether the string p.buf[start:end] (escaped when esc)
// is name.
func (s *jsonScan) nameIs(start, end int, esc bool, name string) bool {
	raw := s.p.Bytes()[start:end]
	if hasControl(raw) {
		return false
	}
	if !esc {
		return string(raw) == name
	}
	return string(unescape(raw)) == name
}

// scalar reads the field's value, whose first byte is c: a non-empty
// string or a number; anything else makes the source absent.
func (s *jsonScan) scalar(c byte) (string, bool) {
	switch {
	case c == '"':
		start, end, esc, ok := s.str()
		if !ok || end == start || hasControl(s.p.Bytes()[start:end]) {
			return "", false
		}
		if esc {
			v := unescape(s.p.Bytes()[start:end])
			return unsafe.String(unsafe.SliceData(v), len(v)), len(v) > 0
		}
		s.p.Lend()
		return unsafe.String(&s.p.Bytes()[start], end-start), true
	case c == '-' || '0' <= c && c <= '9':
		start := s.pos
		end, ok := s.number()
		if !ok {
			return "", false
		}
		s.p.Lend()
		return unsafe.String(&s.p.Bytes()[start], end-start), true
	}
	return "", false
}

// literal scans true, false or null at pos.
func (s *jsonScan) literal(w string) bool {
	if !s.ensure(s.pos+len(w)) || string(s.p.Bytes()[s.pos:s.pos+len(w)]) != w {
		return false
	}
	s.pos += len(w)
	return true
}

// number scans a JSON number at pos and returns where it ends. The byte
// after it must be in the body (and the limit), and be one that can
// follow a value: a number cut by the limit is not taken for a shorter
// one.
func (s *jsonScan) number() (int, bool) {
	i := s.pos
	at := func(i int) byte {
		if !s.ensure(i + 1) {
			return 0
		}
		return s.p.Bytes()[i]
	}
	digits := func(i int) int {
		for c := at(i); '0' <= c && c <= '9'; c = at(i) {
			i++
		}
		return i
	}
	if at(i) == '-' {
		i++
	}
	switch c := at(i); {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if at(i) == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if c := at(i); c == 'e' || c == 'E' {
		i++
		if c := at(i); c == '+' || c == '-' {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	switch at(i) {
	case ' ', '\t', '\n', '\r', ',', '}', ']':
	default:
		return 0, false
	}
	s.pos = i
	return i, true
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// unescape decodes the content of a JSON string already checked by str,
// as encoding/json does: a lone or mismatched surrogate becomes U+FFFD.
// Bytes that are not UTF-8 are kept as they are.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch e := raw[i+1]; e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2 = hex4(raw[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, e)
		}
		i += 2
	}
	return out
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
