// Package ring implements ringlb's immutable weighted consistent-hash ring.
//
// A Ring is built once from a set of members (name, weight) and never
// changes; a membership change builds a new Ring. Each member owns
// round(PointsPerWeight × weight) points. A key is hashed onto the same
// 64-bit circle and belongs to the first point at or after its hash,
// wrapping past the top:
//
//	        key
//	         ↓
//	0 ──A──B──•──C──A──B──C── 2⁶⁴-1 ─┐
//	          └─→ C owns the key      │
//	   ↑──────────── wraps ───────────┘
//
// The preference walk continues clockwise from that point and yields each
// member once, in the order it is met; Pick walks it and returns the first
// member the caller accepts (available, not slow-starting at that point,
// not over its bounded load).
//
// Usage:
//
//	r, err := ring.New([]ring.Member{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}},
//		ring.Options{PointsPerWeight: 160})
//	owner := r.Owner(r.Hash("user-42")) // index into r.Members()
//
// Two placements exist. PlacementRinglb puts member points at
// xxhash64("NAME#i") and hashes keys with xxhash64. PlacementNginx
// reproduces nginx's `hash $key consistent` (ketama-style CRC32 points from
// "host\0port", CRC32 key hashes) so that a fleet moving from nginx keeps
// every key on the same upstream. Under nginx placement 32-bit positions
// are stored in the top half of the 64-bit circle, which preserves their
// order and the "first at or after" rule exactly.
//
// Lookups cost one key hash plus, in the usual case, two memory reads: a
// table over the top bits of the circle (2-4 buckets per point) gives the
// first point at or after the bucket's start, and a short forward scan
// (usually no step or one) over points that store position and owner side
// by side finds the answer; a sentinel past the last point makes the scan
// wrap without a bounds test. Owner, Walk and Pick allocate nothing for
// rings of up to 1024 members. The benchmarks in bench_test.go hold this to
// account: a regression shows as allocs/op above 0 or as Owner losing its
// lead over a plain binary search (see BenchmarkPlainBinarySearch).
package ring

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"strconv"
)

// Placement selects how points and key hashes are computed.
type Placement string

const (
	// PlacementRinglb places points at xxhash64("NAME#i") and hashes keys
	// with xxhash64. The default.
	PlacementRinglb Placement = "ringlb"
	// PlacementNginx reproduces nginx's `hash $key consistent`.
	PlacementNginx Placement = "nginx"
)

// NginxPointsPerWeight is the number of points nginx gives each unit of
// weight; it is fixed under PlacementNginx.
const NginxPointsPerWeight = 160

// ErrEmpty is returned by New for a ring without members, unless
// Options.AllowEmpty.
var ErrEmpty = errors.New("ring: no members")

// Member is one upstream as the ring sees it.
type Member struct {
	// Name identifies the member under PlacementRinglb and in every answer.
	Name string
	// Addr is the host[:port] exactly as written in the upstream's URL. It is
	// the member's identity under PlacementNginx and unused otherwise.
	Addr string
	// Weight is > 0. Under PlacementNginx it must be a whole number.
	Weight float64
}

// Options configures New. The zero value is not valid: PointsPerWeight must
// be set (0 means NginxPointsPerWeight under PlacementNginx).
type Options struct {
	// Placement defaults to PlacementRinglb when empty.
	Placement Placement
	// PointsPerWeight is the number of virtual nodes per unit of weight.
	PointsPerWeight int
	// AllowEmpty lets New build a ring without members (say, before a
	// discovery source's first answer): Pick finds no member, Owner
	// returns -1 and Walk calls nothing.
	AllowEmpty bool
}

// point is one virtual node: its position, the member that owns it and its
// sequence number within that member (the i of "NAME#i"), which fixes the
// order in which slow start activates points. Position and owner sit
// together so a lookup touches one cache line for both.
type point struct {
	pos    uint64
	member int32
	seq    int32
}

// Ring is an immutable consistent-hash ring. It is safe for concurrent use.
type Ring struct {
	placement Placement
	ppw       int
	members   []Member
	points    []int // per member: points it owns on the ring
	share     []float64

	// pts holds the n points sorted by position, then a sentinel at
	// pts[n]: position 2^64-1 and the first point's owner, so a scan for
	// "first at or after h" needs no bounds test and wraps by itself.
	pts   []point
	n     int
	tbl   []uint32 // tbl[b] = first index with pos >= b<<shf (n if none); len 2^k
	shf   uint     // 64 - k
	ver   string
	nginx bool
}

// New builds a ring. Members are identified by Name (PlacementRinglb) or
// Addr (PlacementNginx); their order does not matter under PlacementRinglb.
// Under PlacementNginx ties between equal CRC32 points go to the member
// listed first, as nginx's sort leaves them.
func New(members []Member, opt Options) (*Ring, error) {
	if len(members) == 0 && !opt.AllowEmpty {
		return nil, ErrEmpty
	}
	if opt.Placement == "" {
		opt.Placement = PlacementRinglb
	}
	r := &Ring{placement: opt.Placement, ppw: opt.PointsPerWeight}
	switch opt.Placement {
	case PlacementRinglb:
		if r.ppw <= 0 {
			return nil, fmt.Errorf("ring: points_per_weight must be > 0, got %d", r.ppw)
		}
	case PlacementNginx:
		r.nginx = true
		if r.ppw == 0 {
			r.ppw = NginxPointsPerWeight
		}
		if r.ppw != NginxPointsPerWeight {
			return nil, fmt.Errorf("ring: placement nginx needs points_per_weight %d, got %d", NginxPointsPerWeight, r.ppw)
		}
	default:
		return nil, fmt.Errorf("ring: unknown placement %q", opt.Placement)
	}
	if len(members) > math.MaxInt32 {
		return nil, fmt.Errorf("ring: too many members")
	}
	r.members = slices.Clone(members)
	if opt.Placement == PlacementRinglb {
		// Config order must not matter: sort by name so index order, tie
		// order and everything derived from it are the same everywhere.
		slices.SortFunc(r.members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	}
	seen := make(map[string]bool, len(members))
	for i, m := range r.members {
		id := r.identity(i)
		if seen[id] {
			return nil, fmt.Errorf("ring: duplicate member %q", id)
		}
		seen[id] = true
		if !(m.Weight > 0) || math.IsInf(m.Weight, 0) {
			return nil, fmt.Errorf("ring: member %q: weight must be > 0, got %v", id, m.Weight)
		}
		if opt.Placement == PlacementNginx && m.Weight != math.Trunc(m.Weight) {
			return nil, fmt.Errorf("ring: member %q: placement nginx needs a whole weight, got %v", id, m.Weight)
		}
		if n := PointsFor(r.ppw, m.Weight); n < 1 || n >= math.MaxInt32 {
			return nil, fmt.Errorf("ring: member %q: weight %v gives %d points", id, m.Weight, n)
		}
	}
	switch opt.Placement {
	case PlacementRinglb:
		r.buildRinglb()
	case PlacementNginx:
		r.buildNginx()
	}
	if len(r.members) > 0 {
		r.buildIndex()
	}
	r.buildShares()
	r.ver = version(r)
	return r, nil
}

// identity returns member i's identity: its Addr under PlacementNginx,
// its Name otherwise.
func (r *Ring) identity(i int) string {
	if r.placement == PlacementNginx {
		return r.members[i].Addr
	}
	return r.members[i].Name
}

// PointsFor returns how many points a member of the given weight owns
// at ppw points per unit of weight: round(ppw × weight), halves rounded
// away from zero. Counts of math.MaxInt32 or more come back as
// math.MaxInt32, more than New accepts. Everything that counts points
// (the ring, slow start, the config's limits, simulate) uses it.
func PointsFor(ppw int, weight float64) int {
	p := math.Round(float64(ppw) * weight)
	if !(p < math.MaxInt32) {
		return math.MaxInt32
	}
	return int(p)
}

// nginxKeyHash is ngx_crc32_long(key) placed in the top half of the circle.
// It reads the string's bytes in place: []byte(key) would allocate, since
// crc32 passes its argument to assembly through a function value.
func nginxKeyHash(key string) uint64 {
	return uint64(crc32.ChecksumIEEE(unsafe.Slice(unsafe.StringData(key), len(key)))) << 32
}

// Placement returns the ring's placement.
func (r *Ring) Placement() Placement { return r.placement }

// PointsPerWeight returns the points per unit of weight the ring was built with.
func (r *Ring) PointsPerWeight() int { return r.ppw }

// Members returns the members in index order (sorted by name under
// PlacementRinglb; as given under PlacementNginx). The slice must not be
// modified.
func (r *Ring) Members() []Member { return r.members }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Index returns the index of the member called name, or -1.
func (r *Ring) Index(name string) int {
	for i := range r.members {
		if r.members[i].Name == name {
			return i
		}
	}
	return -1
}

// Points returns how many points member i holds on the ring (after nginx's
// removal of duplicate positions).
func (r *Ring) Points(i int) int { return r.points[i] }

// TotalPoints returns the number of points on the ring.
func (r *Ring) TotalPoints() int { return r.n }

// Share returns the fraction of the hash space member i owns.
func (r *Ring) Share(i int) float64 { return r.share[i] }

// Hash returns the key's position on the circle.
func (r *Ring) Hash(key string) uint64 {
	if r.nginx {
		return nginxKeyHash(key)
	}
	return xxhash.Sum64String(key)
}

// FormatHash renders a position as hex: 16 digits, or 8 under PlacementNginx.
func (r *Ring) FormatHash(h uint64) string {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	var b [16]byte
	hex.Encode(b[:], raw[:])
	if r.placement == PlacementNginx {
		return string(b[:8]) // the top 32 bits
	}
	return string(b[:])
}

// Places reports whether r (nil: none) places keys as New(members, o)
// would, so that a caller may keep r rather than build and sort all its
// points again. It answers only under placement ringlb, where a member's
// Addr takes no part: r has the same names and weights, and
// o.PointsPerWeight as given (0 does not stand for its default here).
// Under placement nginx it reports false.
func (r *Ring) Places(members []Member, o Options) bool {
	if r == nil || r.placement != PlacementRinglb || o.Placement == PlacementNginx ||
		r.ppw != o.PointsPerWeight || r.Len() != len(members) {
		return false
	}
	pm := r.Members() // sorted by name under placement ringlb
	for _, m := range members {
		i, ok := slices.BinarySearchFunc(pm, m.Name, func(p Member, n string) int { return strings.Compare(p.Name, n) })
		if !ok || pm[i].Weight != m.Weight {
			return false
		}
	}
	return true
}

// ParseHash reads a position as FormatHash writes it: 16 hex digits, or 8
// under PlacementNginx (the top 32 bits). ok is false for anything else.
func (r *Ring) ParseHash(hash string) (pos uint64, ok bool) {
	digits := 16
	if r.placement == PlacementNginx {
		digits = 8
	}
	if len(hash) != digits {
		return 0, false
	}
	v, err := strconv.ParseUint(hash, 16, 64)
	if err != nil {
		return 0, false
	}
	if digits == 8 {
		v <<= 32
	}
	return v, true
}

// search returns the index of the first point at or after h: n (the
// sentinel, which carries the first point's owner) when h is above the last
// point.
func (r *Ring) search(h uint64) int {
	i := r.tbl[h>>r.shf]
	for r.pts[i].pos < h {
		i++
	}
	return int(i)
}

// start returns the index of the point owning h, wrapping to 0.
func (r *Ring) start(h uint64) int {
	i := r.search(h)
	if i == r.n {
		return 0
	}
	return i
}

// Owner returns the index of the member owning position h, ignoring
// availability and load; -1 on an empty ring.
func (r *Ring) Owner(h uint64) int {
	if r.n == 0 {
		return -1
	}
	return int(r.pts[r.search(h)].member)
}

// Version returns a short hash of the membership: placement, identities,
// weights and points per weight. It does not depend on member order.
func (r *Ring) Version() string { return r.ver }
