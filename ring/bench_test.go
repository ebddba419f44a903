package ring

// Benchmarks of the request-path operations. Run:
//
//	go test ./ring -run '^$' -bench . -benchmem -count=6 | tee new.txt
//	benchstat old.txt new.txt
//
// A regression looks like: any allocs/op above 0 for Owner or Pick (a
// fresh slice or an escaping closure per request); Owner slower than
// BenchmarkPlainBinarySearch at members=8, or more than half its time at
// members=100 (the bucket index no longer pays for itself); Pick more than
// a few ns above Owner when the owner is accepted (the walk set-up got
// expensive). Keys come from a fixed pool of realistic 12-40 byte keys,
// hashing included, so the numbers are per request.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

const benchPool = 1 << 14 // keys; a power of two so i&mask picks one

var (
	benchKeys = testKeys(benchPool)
	sinkInt   int
)

func benchRing(b testing.TB, members int) *Ring {
	return mustNew(b, equalMembers(members), Options{PointsPerWeight: 160})
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{8, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := benchRing(b, n)
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				s += r.Owner(r.Hash(benchKeys[i&(benchPool-1)]))
			}
			sinkInt = s
		})
	}
}

func BenchmarkOwnerNginx(b *testing.B) {
	for _, n := range []int{8, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ms := equalMembers(n)
			for i := range ms {
				ms[i].Addr = fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250)
			}
			r := mustNew(b, ms, Options{Placement: PlacementNginx})
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				s += r.Owner(r.Hash(benchKeys[i&(benchPool-1)]))
			}
			sinkInt = s
		})
	}
}

// BenchmarkPick: a request's pick as the balancer makes it: one member
// unhealthy (its keys walk on to the next member) and a bounded-load check
// against live counts of 8-12 in flight per member, under the cap of 13,
// so no one is full.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{8, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := benchRing(b, n)
			inflight := make([]int64, n)
			for i := range inflight {
				inflight[i] = int64(8 + i%5)
			}
			var total int64 = int64(n) * 10
			W := float64(n)
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				c, _ := r.Pick(r.Hash(benchKeys[i&(benchPool-1)]), func(m, _ int) Reason {
					if m == 1 {
						return Unhealthy
					}
					if inflight[m] >= Limit(1.25, 1, total, 1, W) {
						return Full
					}
					return Accept
				}, nil)
				s += c.Member
			}
			sinkInt = s
		})
	}
}

// BenchmarkPlainBinarySearch is the baseline Owner must beat: the plainest
// good implementation, sorted positions and a parallel owner slice searched
// with slices.BinarySearch, at the same points, hashing included.
func BenchmarkPlainBinarySearch(b *testing.B) {
	for _, n := range []int{8, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			type pt struct {
				pos   uint64
				owner int32
			}
			var pts []pt
			for m, mem := range equalMembers(n) {
				for i := range 160 {
					pts = append(pts, pt{xxhash.Sum64String(fmt.Sprintf("%s#%d", mem.Name, i)), int32(m)})
				}
			}
			slices.SortFunc(pts, func(a, b pt) int {
				if a.pos < b.pos {
					return -1
				}
				if a.pos > b.pos {
					return 1
				}
				return int(a.owner - b.owner)
			})
			pos := make([]uint64, len(pts))
			owner := make([]int32, len(pts))
			for i, p := range pts {
				pos[i], owner[i] = p.pos, p.owner
			}
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				j, _ := slices.BinarySearch(pos, xxhash.Sum64String(benchKeys[i&(benchPool-1)]))
				if j == len(pos) {
					j = 0
				}
				s += int(owner[j])
			}
			sinkInt = s
		})
	}
}

// BenchmarkHash isolates the key hash, to read Owner's lookup cost as
// Owner minus Hash.
func BenchmarkHash(b *testing.B) {
	b.ReportAllocs()
	var s uint64
	for i := 0; b.Loop(); i++ {
		s += xxhash.Sum64String(benchKeys[i&(benchPool-1)])
	}
	sinkInt = int(s)
}
