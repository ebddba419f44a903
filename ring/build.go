package ring

// This file builds a ring: it places the points of each member, sorts them,
// indexes the circle and works out each member's share of it.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// buildRinglb places each member's points at xxhash64("NAME#i") and sorts them.
func (r *Ring) buildRinglb() {
	total := 0
	for _, m := range r.members {
		total += PointsFor(r.ppw, m.Weight)
	}
	es := make([]point, 0, total+1)
	buf := make([]byte, 0, 64)
	for i, m := range r.members {
		n := PointsFor(r.ppw, m.Weight)
		for j := 0; j < n; j++ {
			buf = append(buf[:0], m.Name...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(j), 10)
			es = append(es, point{xxhash.Sum64(buf), int32(i), int32(j)})
		}
	}
	// Members are sorted by name, so ordering ties by member index orders
	// them by name.
	sortPoints(es)
	r.pts = es
}

// comparePoints orders points by position, then member, then seq.
func comparePoints(a, b point) int {
	if a.pos != b.pos {
		if a.pos < b.pos {
			return -1
		}
		return 1
	}
	if a.member != b.member {
		return int(a.member - b.member)
	}
	return int(a.seq - b.seq)
}

// bucketMin is the number of points from which sortPoints buckets them.
const bucketMin = 2048

// sortPoints sorts es by position, then member, then seq. Many points
// (positions are hashes, spread evenly) are first spread over about n/4
// buckets by their top bits, in one counting pass, then each bucket is
// sorted alone: the 160,000 points of 1000 members take a few
// milliseconds, a fraction of a comparison sort of the whole. A bucket
// that gets many points (positions that are not spread) is sorted with
// the comparison sort, so no input is quadratic.
func sortPoints(es []point) {
	if len(es) < bucketMin {
		slices.SortFunc(es, comparePoints)
		return
	}
	b := min(max(bits.Len(uint(len(es)/4)), 8), 16)
	shift := 64 - b
	starts := make([]int, 1<<b+1) // bucket i is [starts[i], starts[i+1])
	for _, p := range es {
		starts[p.pos>>shift+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	next := slices.Clone(starts[:1<<b])
	tmp := make([]point, len(es))
	for _, p := range es {
		i := p.pos >> shift
		tmp[next[i]] = p
		next[i]++
	}
	copy(es, tmp)
	for i := range 1 << b {
		bucket := es[starts[i]:starts[i+1]]
		switch {
		case len(bucket) < 2:
		case len(bucket) <= 16: // insertion sort
			for j := 1; j < len(bucket); j++ {
				for k := j; k > 0 && comparePoints(bucket[k], bucket[k-1]) < 0; k-- {
					bucket[k], bucket[k-1] = bucket[k-1], bucket[k]
				}
			}
		default:
			slices.SortFunc(bucket, comparePoints)
		}
	}
}

// splitNginxAddr splits "host:port" as nginx's ngx_http_upstream_init_chash
// does: the port is the run of digits after the last ':', if any; "unix:"
// addresses have no port.
func splitNginxAddr(s string) (host, port string) {
	if len(s) >= 5 && strings.EqualFold(s[:5], "unix:") {
		return s[5:], ""
	}
	for j := 0; j < len(s); j++ {
		c := s[len(s)-j-1]
		if c == ':' {
			return s[:len(s)-j-1], s[len(s)-j:]
		}
		if c < '0' || c > '9' {
			break
		}
	}
	return s, ""
}

// buildNginx places each member's points as nginx's ketama-style CRC32 chain.
func (r *Ring) buildNginx() {
	total := 0
	for _, m := range r.members {
		total += PointsFor(r.ppw, m.Weight)
	}
	es := make([]point, 0, total+1)
	for i, m := range r.members {
		host, port := splitNginxAddr(m.Addr)
		base := crc32.Update(0, crc32.IEEETable, []byte(host))
		base = crc32.Update(base, crc32.IEEETable, []byte{0})
		base = crc32.Update(base, crc32.IEEETable, []byte(port))
		var prev [4]byte // little-endian previous hash, as nginx on x86
		n := PointsFor(r.ppw, m.Weight)
		for j := 0; j < n; j++ {
			h := crc32.Update(base, crc32.IEEETable, prev[:])
			es = append(es, point{uint64(h) << 32, int32(i), int32(j)})
			binary.LittleEndian.PutUint32(prev[:], h)
		}
	}
	// nginx sorts by hash alone with ngx_qsort (libc qsort; glibc's is a
	// stable merge sort for arrays this size), then keeps the first of each
	// run of equal hashes: a tie goes to the member listed first, and for
	// one member to its earlier point. nginx_test.go checks this against a
	// real nginx (glibc) with two servers sharing a point. A qsort that is
	// not stable (musl's, as in Alpine images) may break such ties the
	// other way; they are rare (about n²/2³³ for n points: 0.03 at 16000).
	slices.SortStableFunc(es, func(a, b point) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		}
		return 0
	})
	r.pts = slices.CompactFunc(es, func(a, b point) bool { return a.pos == b.pos })
}

// buildIndex adds the sentinel and builds a table over the top k bits of
// the circle: tbl[b] is the index of the first point at or after b<<shf. A
// lookup starts there and steps forward while points are below the key's
// hash; with 2-4 buckets per point that is usually no step or one.
func (r *Ring) buildIndex() {
	r.n = len(r.pts)
	first := r.pts[0]
	r.pts = append(r.pts, point{math.MaxUint64, first.member, first.seq})
	k := bits.Len(uint(r.n)) + 1
	if k > 24 {
		k = 24
	}
	r.shf = uint(64 - k)
	buckets := 1 << k
	r.tbl = make([]uint32, buckets)
	j := 0
	for b := 0; b < buckets; b++ {
		start := uint64(b) << r.shf
		for j < r.n && r.pts[j].pos < start {
			j++
		}
		r.tbl[b] = uint32(j)
	}
}

// buildShares counts each member's points and the fraction of the circle it owns.
func (r *Ring) buildShares() {
	n := r.n
	r.points = make([]int, len(r.members))
	r.share = make([]float64, len(r.members))
	for i := range n {
		m := r.pts[i].member
		r.points[m]++
		// The arc owned by point i runs from the previous point (exclusive)
		// to this one (inclusive); the first point's arc wraps.
		var arc uint64
		if i == 0 {
			arc = r.pts[0].pos - r.pts[n-1].pos // wraps modulo 2^64
			if n == 1 {
				arc = math.MaxUint64
			}
		} else {
			arc = r.pts[i].pos - r.pts[i-1].pos
		}
		r.share[m] += float64(arc) / (1 << 64)
	}
}

// version hashes the membership into the short string Version returns.
func version(r *Ring) string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = r.identity(i) + "\x00" + strconv.FormatFloat(m.Weight, 'g', -1, 64)
	}
	slices.Sort(ids)
	var b strings.Builder
	b.WriteString(string(r.placement))
	b.WriteString("\n")
	b.WriteString(strconv.Itoa(r.ppw))
	for _, id := range ids {
		b.WriteString("\n")
		b.WriteString(id)
	}
	return fmt.Sprintf("%012x", xxhash.Sum64String(b.String())>>16)
}
