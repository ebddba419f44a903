package key

// The canonical writer's strings: member names in JCS order, and string
// values written with the fewest escapes.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// compareNames compares two members' names as JCS orders them: by their
// UTF-16 code units, unescaped.
func (s *canonScan) compareNames(a, b member) int {
	x, y := s.out[a.start+1:a.colon-1], s.out[b.start+1:b.colon-1]
	if plainASCII(x) && plainASCII(y) {
		return bytes.Compare(x, y)
	}
	for len(x) > 0 && len(y) > 0 {
		rx, nx := canonRune(x)
		ry, ny := canonRune(y)
		x, y = x[nx:], y[ny:]
		if rx == ry {
			continue
		}
		ux, uy := firstUnit(rx), firstUnit(ry)
		if ux != uy {
			return cmpInt(ux, uy)
		}
		return cmpInt(int(rx), int(ry)) // same high surrogate: the low ones decide, as the runes do
	}
	return cmpInt(len(x), len(y))
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) int {
	if r >= 0x10000 {
		r1, _ := utf16.EncodeRune(r)
		return int(r1)
	}
	return int(r)
}

// plainASCII says b holds no escape and no byte beyond ASCII.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// canonRune decodes the first character of canonical string text.
func canonRune(b []byte) (rune, int) {
	if b[0] != '\\' {
		if b[0] < 0x80 {
			return rune(b[0]), 1
		}
		return utf8.DecodeRune(b)
	}
	switch b[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		return hex4(b[2:]), 6
	}
	return rune(b[1]), 2 // '"' or '\\'
}

// writeString writes the string at pos canonically, up to lim, and
// passes it: control bytes (not JSON), bytes that are not UTF-8 and
// lone surrogates (not Unicode) in what it writes make it fail. It reads
// the string once, eight bytes at a time while they need nothing done;
// past lim the rest is only scanned (jsonScan.strFrom).
func (s *canonScan) writeString(lim int) bool {
	i := s.pos + 1
	run := i // text from run to i is to be copied as it is
	s.out = append(s.out, '"')
	for {
		buf := s.p.Bytes()
		for i+8 <= len(buf) {
			w := binary.LittleEndian.Uint64(buf[i:])
			q, bs := w^quotes, w^backslashes
			// A byte below 0x20, from 0x80, a quote or a backslash
			// sets its high bit in one of the terms.
			// The lowest is the first such byte (a borrow only carries
			// upwards).
			if m := (w | (w - spaces) | (q-ones)&^q | (bs-ones)&^bs) & highs; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(buf) {
			if !s.p.More() {
				return false
			}
			continue
		}
		if len(s.out)+i-run >= lim {
			s.cutRun(buf[run:i], lim)
			return s.passString(i)
		}
		switch c := buf[i]; {
		case c == '"':
			s.out = append(s.out, buf[run:i]...)
			s.out = append(s.out, '"')
			if len(s.out) > lim {
				s.out = s.out[:lim]
			}
			s.pos = i + 1
			return true
		case c == '\\':
			if i+1 >= len(buf) {
				if !s.p.More() {
					return false
				}
				continue
			}
			switch buf[i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				i += 2 // written as it is
				continue
			}
			s.out = append(s.out, buf[run:i]...)
			n, ok := s.escape(i)
			if !ok {
				return false
			}
			i += n
			run = i
		case c < 0x20:
			return false
		case c < 0x80:
			i++
		case c >= 0xc2 && c <= 0xdf && i+1 < len(buf) && buf[i+1]&0xc0 == 0x80:
			i += 2 // a two-byte character
		default:
			if !utf8.FullRune(buf[i:]) && s.p.More() {
				continue
			}
			r, n := utf8.DecodeRune(s.p.Bytes()[i:])
			if r == utf8.RuneError && n == 1 {
				s.bad = true
				return false
			}
			i += n
		}
	}
}

// The words writeString tests eight bytes at a time with.
const (
	ones        = 0x0101010101010101
	highs       = 0x8080808080808080
	spaces      = 0x2020202020202020
	quotes      = 0x2222222222222222
	backslashes = 0x5c5c5c5c5c5c5c5c
)

// cutRun appends the text run, cut at lim (and to the end of the
// character the cut falls in).
func (s *canonScan) cutRun(run []byte, lim int) {
	k := max(lim-len(s.out), 0)
	for k < len(run) && run[k]&0xc0 == 0x80 {
		k++
	}
	s.out = append(s.out, run[:min(k, len(run))]...)
	if len(s.out) > lim {
		s.out = s.out[:lim]
	}
}

// passString scans the rest of the string from i (not inside an
// escape) without writing it.
func (s *canonScan) passString(i int) bool {
	_, _, ok := s.strFrom(i)
	return ok
}

// escape writes the character of the escape at p.buf[i] canonically and
// returns its length; false when it is not JSON's, or a lone surrogate.
func (s *canonScan) escape(i int) (int, bool) {
	if !s.ensure(i + 2) {
		return 0, false
	}
	var r rune
	n := 2
	switch e := s.p.Bytes()[i+1]; e {
	case 'u':
		if !s.ensure(i+6) || !isHex4(s.p.Bytes()[i+2:]) {
			return 0, false
		}
		r, n = hex4(s.p.Bytes()[i+2:]), 6
		if utf16.IsSurrogate(r) {
			if r >= 0xdc00 || !s.ensure(i+12) {
				s.bad = true
				return 0, false
			}
			if buf := s.p.Bytes(); buf[i+6] != '\\' || buf[i+7] != 'u' || !isHex4(buf[i+8:]) {
				s.bad = true
				return 0, false
			}
			r2 := hex4(s.p.Bytes()[i+8:])
			if r2 < 0xdc00 || r2 > 0xdfff {
				s.bad = true
				return 0, false
			}
			r, n = utf16.DecodeRune(r, r2), 12
		}
	case 'b':
		r = '\b'
	case 'f':
		r = '\f'
	case 'n':
		r = '\n'
	case 'r':
		r = '\r'
	case 't':
		r = '\t'
	case '"', '\\', '/':
		r = rune(e)
	default:
		return 0, false
	}
	s.out = appendCanonRune(s.out, r)
	return n, true
}

// appendCanonRune writes r as it stands in a canonical string.
func appendCanonRune(b []byte, r rune) []byte {
	switch r {
	case '"':
		return append(b, '\\', '"')
	case '\\':
		return append(b, '\\', '\\')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
	}
	return utf8.AppendRune(b, r)
}
