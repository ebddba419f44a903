package key

// The canonical JSON writer of the prefix source: RFC 8785 (JCS) text of
// the values it scans, written as the streaming scan passes them.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// canonScan writes values of a JSON body as RFC 8785 canonical JSON
// (JCS): no whitespace, object members sorted by their names' UTF-16
// code units, strings with the fewest escapes (\" \\ \b \f \n \r \t and
// \u00xx for the other control characters, everything else as UTF-8),
// numbers as ECMAScript writes the IEEE 754 double they denote. It
// scans with jsonScan's lexer, so the body is read only as far as the
// values go.
//
// Each value is written up to a limit (lim, an index of out): what
// would come after it is scanned, not kept. An object's members are
// written in the body's order, each up to keep bytes of its own, and put
// in order when the object closes, which then keeps keep bytes: the
// first keep bytes of every value are exactly those of its whole
// canonical text, at a cost in memory of keep bytes per member at
// most (the names are kept whole, to be compared).
type canonScan struct {
	jsonScan
	out  []byte
	keep int
	mems []member // the members of the objects being written, innermost last
	// roleAt is the depth of the objects whose "role" member is
	// looked at; user says the last one closed had "role":"user".
	roleAt int
	user   bool
	// maxOut bounds out: a pathological body (numbers that expand, many
	// members) cannot make it much larger than the body's limit.
	maxOut int
	// bad says the text cannot be written canonically: a string that is
	// not Unicode (bytes that are not UTF-8, a lone surrogate), a number
	// beyond a double's range, a name twice in one object.
	bad bool
}

// member is one written member of an open object: out[start:colon] is
// its name, a canonical string, and out[colon+1:end] its value.
type member struct{ start, colon, end int }

// value scans the value at pos, whose first byte is c, at depth d (the
// containers around it), writing it up to lim.
func (s *canonScan) value(c byte, d, lim int) bool {
	if len(s.out) >= lim {
		return s.skip(c, d)
	}
	switch c {
	case '{':
		return s.object(d+1, lim)
	case '[':
		return s.array(d+1, lim)
	case '"':
		return s.writeString(lim)
	case 't':
		return s.literal("true") && s.emit("true", lim)
	case 'f':
		return s.literal("false") && s.emit("false", lim)
	case 'n':
		return s.literal("null") && s.emit("null", lim)
	}
	start := s.pos
	end, ok := s.number()
	return ok && s.writeNumber(s.p.Bytes()[start:end], lim)
}

// emit appends v, cut at lim.
func (s *canonScan) emit(v string, lim int) bool {
	if n := lim - len(s.out); n < len(v) {
		v = v[:max(n, 0)]
	}
	s.out = append(s.out, v...)
	return true
}

// skip scans the value at pos (first byte c, depth d) without writing.
func (s *canonScan) skip(c byte, d int) bool {
	switch c {
	case '{', '[':
		if d+1 > MaxDepth {
			return false
		}
		end, obj := s.enter(c)
		c, ok := s.next()
		for ok && c != end {
			if obj {
				ok = s.name()
				if ok {
					c, ok = s.next()
				}
			}
			ok = ok && s.skip(c, d+1)
			if ok {
				c, ok = s.following(end)
			}
		}
		s.pos++
		return ok
	case '"':
		_, _, _, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	_, ok := s.number()
	return ok
}

// enter passes the '{' or '[' (c) at pos: end is the byte that closes
// it, obj says it is an object.
func (s *canonScan) enter(c byte) (end byte, obj bool) {
	s.pos++
	if c == '[' {
		return ']', false
	}
	return '}', true
}

// name scans a member's name and its colon, leaving pos after them.
func (s *canonScan) name() bool {
	if c, ok := s.next(); !ok || c != '"' {
		return false
	}
	if _, _, _, ok := s.str(); !ok {
		return false
	}
	if c, ok := s.next(); !ok || c != ':' {
		return false
	}
	s.pos++
	return true
}

// following reads what follows a member or element of a container that
// end closes: end itself (returned, not passed), or a comma, passed, and
// the next value's first byte (returned).
func (s *canonScan) following(end byte) (byte, bool) {
	c, ok := s.next()
	if !ok || c == end {
		return c, ok
	}
	if c != ',' {
		return 0, false
	}
	s.pos++
	c, ok = s.next()
	if ok && c == end {
		return 0, false // a trailing comma
	}
	return c, ok
}

// array writes the array at pos (depth d) up to lim; its elements come
// in order, so the ones past lim are only scanned.
func (s *canonScan) array(d, lim int) bool {
	if d > MaxDepth {
		return false
	}
	s.pos++
	s.out = append(s.out, '[')
	c, ok := s.next()
	for i := 0; ok && c != ']'; i++ {
		if i > 0 {
			s.emit(",", lim)
		}
		ok = s.value(c, d, lim)
		if ok {
			c, ok = s.following(']')
		}
	}
	if !ok {
		return false
	}
	s.pos++
	s.emit("]", lim)
	return true
}

// object writes the object at pos (depth d): each member up to keep
// bytes, then, at its end, the members sorted and the whole cut at lim.
func (s *canonScan) object(d, lim int) bool {
	if d > MaxDepth {
		return false
	}
	s.pos++
	open := len(s.out)
	s.out = append(s.out, '{')
	base := len(s.mems)
	user := false
	c, ok := s.next()
	for i := 0; ok && c != '}'; i++ {
		if i > 0 {
			s.out = append(s.out, ',')
		}
		if c != '"' {
			return false
		}
		m := member{start: len(s.out)}
		if !s.writeString(maxInt) {
			return false
		}
		m.colon = len(s.out)
		s.out = append(s.out, ':')
		if c, ok = s.next(); !ok || c != ':' {
			return false
		}
		s.pos++
		if c, ok = s.next(); !ok || !s.value(c, d, m.start+s.keep) {
			return false
		}
		m.end = len(s.out)
		if d == s.roleAt && string(s.out[m.start:m.end]) == `"role":"user"` {
			user = true
		}
		s.mems = append(s.mems, m)
		if len(s.out) > s.maxOut {
			return false
		}
		c, ok = s.following('}')
	}
	if !ok {
		return false
	}
	s.pos++
	if !s.order(open+1, base) {
		return false
	}
	s.mems = s.mems[:base]
	s.out = append(s.out, '}')
	if len(s.out) > lim {
		s.out = s.out[:lim]
	}
	if d == s.roleAt {
		s.user = user
	}
	return true
}

// maxInt is a limit that is never reached.
const maxInt = int(^uint(0) >> 1)

// order sorts the members s.mems[base:], written from out[from:] in the
// body's order with commas between, into canonical order; false when a
// name occurs twice.
func (s *canonScan) order(from, base int) bool {
	ms := s.mems[base:]
	sorted := true
	for i := 1; i < len(ms); i++ {
		if c := s.compareNames(ms[i-1], ms[i]); c >= 0 {
			if c == 0 {
				s.bad = true
				return false
			}
			sorted = false
		}
	}
	if sorted {
		return true
	}
	// Insertion sort: objects have few members. Then the region is
	// copied behind out and written back in order.
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && s.compareNames(ms[j-1], ms[j]) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
	for i := 1; i < len(ms); i++ {
		if s.compareNames(ms[i-1], ms[i]) == 0 {
			s.bad = true
			return false
		}
	}
	end := len(s.out)
	s.out = append(s.out, s.out[from:end]...)
	w := from
	for i, m := range ms {
		if i > 0 {
			s.out[w] = ','
			w++
		}
		w += copy(s.out[w:], s.out[end+m.start-from:end+m.end-from])
	}
	s.out = s.out[:end]
	return true
}

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

// writeNumber writes the number text v (checked by number) as
// ECMAScript's Number.prototype.toString writes its double, up to lim.
func (s *canonScan) writeNumber(v []byte, lim int) bool {
	start := len(s.out)
	if len(v) <= 15 && plainInt(v) {
		// Exact in a double, and already written the shortest way.
		if string(v) == "-0" {
			v = v[1:]
		}
		s.out = append(s.out, v...)
	} else {
		f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(v), len(v)), 64)
		if err != nil {
			s.bad = true
			return false // beyond a double's range
		}
		s.out = appendES6(s.out, f)
	}
	if len(s.out) > lim {
		s.out = s.out[:max(lim, start)]
	}
	return true
}

// plainInt says v is an integer without fraction or exponent.
func plainInt(v []byte) bool {
	for _, c := range v {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// appendES6 appends f as ECMAScript's Number.prototype.toString writes
// it (ECMA-262, Number::toString): the shortest digits that read back
// as f, in plain notation for decimal exponents from -6 to 20, else as
// d.ddde±n.
func appendES6(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // -0 too
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // d.ddde±xx
	i := bytes.IndexByte(e, 'e')
	mant, exp := e[:i], e[i+1:]
	var digits [24]byte
	k := 0
	for _, c := range mant {
		if c != '.' {
			digits[k] = c
			k++
		}
	}
	x := 0
	for _, c := range exp[1:] {
		x = 10*x + int(c-'0')
	}
	if exp[0] == '-' {
		x = -x
	}
	n := x + 1 // the decimal point comes after n digits
	switch {
	case k <= n && n <= 21:
		b = append(b, digits[:k]...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:k]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits[:k]...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:k]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}
