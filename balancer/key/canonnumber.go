package key

// The canonical writer's numbers: as ECMAScript writes a double.

import (
	"bytes"
	"strconv"
	"unsafe"
)

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
