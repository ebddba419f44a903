package key

// The canonical JSON writer of the prefix source: RFC 8785 (JCS) text of
// the values it scans, written as the streaming scan passes them. Its
// strings are in canonstring.go, its numbers in canonnumber.go.

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
