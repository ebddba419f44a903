package ringcompare

// Lookup benchmarks: ringlb's ring against buraksezer/consistent and
// groupcache's consistenthash, on the same key pool and the same number of
// ring points (160 per member), in one run. See README.md.
//
// A regression looks like: ringlb's allocs/op above 0, or its ns/op no
// longer below both peers at members=8 and members=100.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
	"github.com/golang/groupcache/consistenthash"
	"github.com/ringlb/ringlb/ring"
)

const (
	pool           = 1 << 14 // keys in the pool; a power of two
	pointsPerNode  = 160
	partitionCount = 7919 // buraksezer: partitions, a prime well above the member count
)

// keys is the same pool as ring's own benchmarks: realistic 12-40 byte keys
// from a fixed seed (half "user-N-session-HEX", half random printable).
var keys = func() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@"
	out := make([]string, pool)
	buf := make([]byte, 0, 40)
	for i := range out {
		if i%2 == 0 {
			out[i] = fmt.Sprintf("user-%d-session-%08x", i, rng.Uint32())
			continue
		}
		l := 12 + rng.IntN(29-8)
		buf = buf[:0]
		for range l {
			buf = append(buf, printable[rng.IntN(len(printable))])
		}
		buf = fmt.Appendf(buf, "~%d", i)
		out[i] = string(buf)
	}
	return out
}()

// byteKeys is the pool as []byte, for buraksezer's []byte API, so that its
// numbers do not include a string conversion.
var byteKeys = func() [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}()

var sink string

// nodeName: "node#i/". buraksezer hashes NAME+itoa(replica) with no
// separator, so "node#1"+"50" and "node#15"+"0" would collide; the trailing
// "/" keeps every replica key distinct.
func nodeName(i int) string { return fmt.Sprintf("node#%d/", i) }

type member string

func (m member) String() string { return string(m) }

type xxh struct{}

func (xxh) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

func newRinglb(tb testing.TB, n int) *ring.Ring {
	ms := make([]ring.Member, n)
	for i := range ms {
		ms[i] = ring.Member{Name: nodeName(i), Weight: 1}
	}
	r, err := ring.New(ms, ring.Options{PointsPerWeight: pointsPerNode})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func newBuraksezer(n int) *consistent.Consistent {
	ms := make([]consistent.Member, n)
	for i := range ms {
		ms[i] = member(nodeName(i))
	}
	return consistent.New(ms, consistent.Config{
		PartitionCount:    partitionCount,
		ReplicationFactor: pointsPerNode,
		Load:              1.25,
		Hasher:            xxh{},
	})
}

func newGroupcache(n int) *consistenthash.Map {
	m := consistenthash.New(pointsPerNode, nil) // crc32, its default
	for i := range n {
		m.Add(nodeName(i))
	}
	return m
}

var sizes = []int{8, 100}

func BenchmarkRinglb(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := newRinglb(b, n)
			ms := r.Members()
			b.ReportAllocs()
			var s string
			for i := 0; b.Loop(); i++ {
				s = ms[r.Owner(r.Hash(keys[i&(pool-1)]))].Name
			}
			sink = s
		})
	}
}

func BenchmarkBuraksezer(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			c := newBuraksezer(n)
			b.ReportAllocs()
			var s string
			for i := 0; b.Loop(); i++ {
				s = c.LocateKey(byteKeys[i&(pool-1)]).String()
			}
			sink = s
		})
	}
}

func BenchmarkGroupcache(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			m := newGroupcache(n)
			b.ReportAllocs()
			var s string
			for i := 0; b.Loop(); i++ {
				s = m.Get(keys[i&(pool-1)])
			}
			sink = s
		})
	}
}

// TestAllSpread is a sanity check that the three are set up alike: every
// member of each gets a share of the pool.
func TestAllSpread(t *testing.T) {
	for _, n := range sizes {
		r, c, g := newRinglb(t, n), newBuraksezer(n), newGroupcache(n)
		got := [3]map[string]int{{}, {}, {}}
		for i, k := range keys {
			got[0][r.Members()[r.Owner(r.Hash(k))].Name]++
			got[1][c.LocateKey(byteKeys[i]).String()]++
			got[2][g.Get(k)]++
		}
		for j, name := range []string{"ringlb", "buraksezer", "groupcache"} {
			if len(got[j]) != n {
				t.Errorf("%s, %d members: only %d got keys", name, n, len(got[j]))
			}
		}
	}
}
